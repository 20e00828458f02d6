"""What a coverage attempt costs against a plain attempt of the default case.

Runs ``pipeline/t2va-int8[cpu]`` through the harness's own executor in one warm worker (as
``harness run --coverage`` and ``harness compare`` run a coverage attempt: after the case's
timed attempts, in the worker that ran them), alternating plain and coverage attempts (plain,
coverage, coverage, plain, ...) so drift in the machine's load falls on both. Prints the
medians of the whole attempt (as the manager sees it: the worker's round trip, the coverage
data and its statement spans included) and of the target alone, and their ratios; the
issue's bar is 1.5x. coverage.py's core is reported (sysmon on Python 3.12+, the C tracer on
3.11).

    python bench/bench_coverage.py [--pairs 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness.cases import build_plan, load_suite  # noqa: E402
from harness.execution.executor import Executor  # noqa: E402
from harness.execution.workers import SideSpec  # noqa: E402
from harness.platforms.profile import resolve_profile  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pairs", type=int, default=5, help="plain/coverage pairs (default 5)")
    args = parser.parse_args()
    import coverage

    core = "sysmon" if sys.version_info >= (3, 12) else "ctrace (C tracer)"
    print(f"python {sys.version.split()[0]}, coverage.py {coverage.__version__}, core {core}")
    suite = load_suite([REPO / "cases" / "pipeline" / "t2va.toml"])
    (item,) = build_plan(suite.cases, ["cpu"], "t2va-int8 and not pruned")
    root = str(REPO / "targets" / "tinyav")
    walls: dict[str, list[float]] = {"plain": [], "coverage": []}
    inner: dict[str, list[float]] = {k: [] for k in walls}
    with tempfile.TemporaryDirectory() as tmp:
        ex = Executor(
            run_dir=Path(tmp),
            profile=resolve_profile(None, REPO / "runners"),
            sides={"head": SideSpec("head", (root,), cwd=str(REPO))},
            references_root=str(REPO / "references"),
        )
        try:

            def one(kind: str, index: int) -> None:
                t0 = time.perf_counter()
                a, raw = ex.run_job(
                    "head",
                    item,
                    index=index,
                    repeat=0,
                    retry=0,
                    warmup=False,
                    coverage=(root,) if kind == "coverage" else None,
                )
                walls[kind].append(time.perf_counter() - t0)
                inner[kind].append(a.duration_s or 0.0)
                assert a.status == "passed", (kind, a.status, a.error)
                if kind == "coverage":
                    assert raw and raw.get("files"), raw

            one("plain", 0)  # the worker's first attempt imports the stack: not counted
            walls["plain"].clear()
            inner["plain"].clear()
            for i in range(args.pairs):
                for kind in ("plain", "coverage") if i % 2 == 0 else ("coverage", "plain"):
                    one(kind, i + 1)
        finally:
            ex.close()
    print(f"{item.name}, {args.pairs} pair(s), medians:")
    for kind in walls:
        print(
            f"  {kind:20} whole attempt {statistics.median(walls[kind]):6.3f} s, "
            f"target {statistics.median(inner[kind]):6.3f} s"
        )
    w = statistics.median(walls["coverage"]) / statistics.median(walls["plain"])
    t = statistics.median(inner["coverage"]) / statistics.median(inner["plain"])
    print(f"coverage / plain: whole attempt {w:.2f}x, target {t:.2f}x (bar: 1.5x)")


if __name__ == "__main__":
    main()
