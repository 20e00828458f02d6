"""Wall time of `harness compare` against two separate `harness run`s of the same rounds.

On the default tinyav pipeline case (``cases/pipeline/t2va.toml``, id ``t2va-int8``): one
``harness compare --base REV --head REV --rounds N --no-confirm`` (both worktrees checked out,
one warm-up per side, N interleaved rounds, every verdict computed) against ``harness run
--repeats N`` twice (one per side, no checkout, no warm-up, no comparison). Prints both wall
times and their ratio; the difference is the price of checkouts, warm-ups and judging.

    python bench/bench_compare.py [--rounds 3] [--rev HEAD]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SELECT = ["cases/pipeline/t2va.toml", "-k", "t2va-int8 and not pruned", "-q"]


def timed(args: list[str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    secs = time.perf_counter() - t0
    if proc.returncode not in (0, 1):
        sys.exit(f"harness {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return secs


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rev", default="HEAD", help="revision on both sides (default HEAD)")
    args = parser.parse_args()
    n = str(args.rounds)
    with tempfile.TemporaryDirectory() as out:
        compare = timed(
            [
                "compare", "--base", args.rev, "--head", args.rev, *SELECT, "--rounds", n,
                "--no-confirm", "--out", out, "--id", "cmp", "--noise-dir", f"{out}/noise",
            ]
        )  # fmt: skip
        runs = sum(
            timed(["run", *SELECT, "--repeats", n, "--out", out, "--run-id", f"run-{side}"])
            for side in ("base", "head")
        )
    print(f"t2va-int8, {n} rounds per side")
    print(f"  harness compare (interleaved, judged): {compare:7.1f} s")
    print(f"  2 x harness run (separate):            {runs:7.1f} s")
    print(f"  ratio compare / runs:                  {compare / runs:7.2f}")


if __name__ == "__main__":
    main()
