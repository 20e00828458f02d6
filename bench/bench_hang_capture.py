"""How long the hang diagnosis of a two-rank hang takes (the issue's bar: within 10 s).

Starts two real Python processes in one process group, as a two-rank server is: rank 0 (the
started process) waits in ``wait_for_rank()`` for a child that never finishes, rank 1
(``RANK=1``) spins in ``stuck_in_all_reduce()``; both registered faulthandler on SIGUSR1, as
tinyav.serve does. Then it times :func:`harness.worker.hang_diagnosis.diagnose` on the group,
as a server case does on a timeout (1 s sampling window, 10 s shared deadline), and prints each
capture's seconds, the median and the worst, and how each rank's stacks were taken.

    python bench/bench_hang_capture.py [--rounds 5] [--no-py-spy]

``--no-py-spy`` times the fallback (faulthandler through SIGUSR1) as on a machine without
py-spy on PATH.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness.worker.hang_diagnosis import diagnose  # noqa: E402

TWO_RANKS = textwrap.dedent(
    """
    import faulthandler, os, signal, subprocess, sys

    faulthandler.register(signal.SIGUSR1, all_threads=True)

    def stuck_in_all_reduce():
        x = 0
        while True:
            x += 1

    def wait_for_rank(child):
        child.wait()

    if sys.argv[1:] == ["rank1"]:
        stuck_in_all_reduce()
    child = subprocess.Popen([sys.executable, __file__, "rank1"], env=dict(os.environ, RANK="1"))
    print("rank 0 waiting for rank 1", flush=True)
    wait_for_rank(child)
    """
)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-py-spy", action="store_true", help="time the faulthandler fallback")
    args = parser.parse_args()
    which = (lambda name: None) if args.no_py_spy else shutil.which
    with tempfile.TemporaryDirectory() as tmp:
        script, log = Path(tmp, "ranks.py"), Path(tmp, "server.log")
        script.write_text(TWO_RANKS)
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, str(script)],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            while log.stat().st_size == 0:  # both started: rank 0 says so after the spawn
                time.sleep(0.05)
            took = []
            for i in range(args.rounds):
                t0 = time.perf_counter()
                d = diagnose(proc.pid, trigger="bench", which=which)  # type: ignore[arg-type]
                took.append(time.perf_counter() - t0)
                ranks = ", ".join(
                    f"rank {p.rank}: {p.where or '-'} [{p.stack_method}]" for p in d.processes
                )
                print(f"capture {i + 1}: {took[-1]:.2f} s ({len(d.processes)} processes; {ranks})")
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    print(
        f"two-rank hang capture: median {statistics.median(took):.2f} s, worst {max(took):.2f} s "
        f"over {len(took)} rounds (of which the sampling window is 1.0 s); target <= 10 s"
    )


if __name__ == "__main__":
    main()
