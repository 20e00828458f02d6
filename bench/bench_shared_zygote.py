"""Many `harness run` processes, each with a zygote of its own versus sharing one, in one
invocation.

Every `harness` process that starts a worker starts a zygote that imports torch; a job that
calls `harness` many times (this repository's test suite does, hundreds of times) pays that per
call unless ``HARNESS_ZYGOTE_DIR`` names a folder where the calls share zygotes. This runs the
real CLI ``--calls`` times in a row, one loader case each (``harness run cases/loader -k CASE``),
without the folder (``private``) and with one (``shared``, the first call's zygote start
included), alternating ``--rounds`` times, and prints the wall time and the CPU of every process
involved per call (the zygotes' too: this process adopts orphans, as a subreaper), and the
ratios. Usage::

    python bench/bench_shared_zygote.py                          # 6 calls, 3 rounds
    python bench/bench_shared_zygote.py --calls 2 --rounds 1     # a smoke run
"""

from __future__ import annotations

import argparse
import ctypes
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness.execution.zygote_service import SHARED_ENV, stop_shared

REPO = Path(__file__).resolve().parents[1]
PR_SET_CHILD_SUBREAPER = 36


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _reap_orphans() -> None:
    """Wait for every adopted process (a shared zygote whose starter exited) to exit."""
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def one(mode: str, calls: int, case: str, root: Path) -> tuple[float, float]:
    """Wall and CPU seconds per call of `harness run` in ``mode`` (private or shared)."""
    env = {k: v for k, v in os.environ.items() if k != SHARED_ENV}
    folder = root / f"zygotes-{time.monotonic_ns()}"
    if mode == "shared":
        env[SHARED_ENV] = str(folder)
    out = root / f"runs-{mode}-{time.monotonic_ns()}"
    cpu0, t0 = _children_cpu(), time.perf_counter()
    argv = [sys.executable, "-m", "harness.cli", "run", "cases/loader", "-k", case, "-q"]
    for i in range(calls):
        proc = subprocess.run(
            [*argv, "--out", str(out), "--run-id", f"r{i}"],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            sys.exit(f"harness run failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    wall = (time.perf_counter() - t0) / calls
    if mode == "shared":
        stop_shared(folder)  # its CPU counts once it has exited and been reaped
    _reap_orphans()
    return wall, (_children_cpu() - cpu0) / calls


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--case", default="load-bf16-exact", help="each call's -k (%(default)s)")
    args = ap.parse_args()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1)
    res: dict[str, list[tuple[float, float]]] = {"private": [], "shared": []}
    with tempfile.TemporaryDirectory(prefix="bench-zyg-") as tmp:
        for r in range(args.rounds):
            for mode in ("private", "shared") if r % 2 == 0 else ("shared", "private"):
                wall, cpu = one(mode, args.calls, args.case, Path(tmp))
                res[mode].append((wall, cpu))
                print(f"round {r + 1} {mode:7}: {wall:.3f} s wall, {cpu:.3f} s CPU per call")
    load = os.getloadavg()[0]
    pw, pc = (statistics.median(x[i] for x in res["private"]) for i in (0, 1))
    sw, sc = (statistics.median(x[i] for x in res["shared"]) for i in (0, 1))
    print(f"\n{args.calls} calls per run, medians of {args.rounds} runs (1-min load {load:.1f}):")
    print(f"  private zygotes: {pw:.3f} s wall, {pc:.3f} s CPU per call")
    print(f"  shared zygote:   {sw:.3f} s wall, {sc:.3f} s CPU per call (its start included)")
    print(f"  ratio private/shared: {pw / sw:.1f}x wall, {pc / sc:.1f}x CPU")


if __name__ == "__main__":
    main()
