"""CPU a fresh process spends loading the report's page templates (run, comparison, explain),
with their compiled code kept between processes (harness.report.template_cache) and without
(an empty ``PYTHONPYCACHEPREFIX`` and ``PYTHONDONTWRITEBYTECODE=1``: nothing to read and
nothing written, so every process compiles them, as every `harness run`, `report` and
`compare` did before). Both sides in one invocation, alternating,
each in ``--processes`` fresh interpreters; prints the median per process and the ratio.

    python bench/bench_templates.py [--processes 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = """
import time
from harness.report.html import environment
env = environment()
t = time.process_time()
for name in ("run.j2", "comparison.j2", "explain.j2"):
    env.get_template(name)
print(time.process_time() - t)
"""


def one(cached: bool, empty: str) -> float:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if not cached:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env["PYTHONPYCACHEPREFIX"] = empty
    out = subprocess.run(
        [sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, check=True
    )
    return float(out.stdout.strip())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--processes", type=int, default=15)
    args = ap.parse_args()
    cached, compiled = [], []
    with tempfile.TemporaryDirectory() as empty:
        one(True, empty)  # the cache written once, as the first process of a session does
        for _ in range(args.processes):
            cached.append(one(True, empty))
            compiled.append(one(False, empty))
    c, n = statistics.median(cached), statistics.median(compiled)
    print(f"templates loaded per process, median of {args.processes}:")
    print(f"  compiled each time: {n * 1e3:6.1f} ms of CPU")
    print(f"  kept compiled:      {c * 1e3:6.1f} ms of CPU")
    print(f"  ratio: {n / c:.1f}x less CPU ({(n - c) * 1e3:.1f} ms a process)")


if __name__ == "__main__":
    main()
