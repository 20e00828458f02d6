"""``harness run``: run cases through persistent workers and write ``reports/<run-id>/``."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Any

from harness.cli.suite import add_suite_args
from harness.errors import UsageError

RUN_EXAMPLE = """\
examples:
  harness run                                  # every case in cases/ on this runner's platform
  harness run cases/pipeline -k "int8 and not ref" --repeats 3
  harness run --runner h100 --budget 1500 --out reports/
"""


def add_parser(sub: Any) -> None:
    run = sub.add_parser(
        "run",
        help="run cases and write reports/<run-id>/",
        description="Run cases through persistent workers, check them, write report.json, "
        "junit.xml and summary.md under --out/<run-id>/.",
        epilog=RUN_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_suite_args(run)
    run.add_argument("--repeats", type=int, metavar="N", help="measured runs per case")
    run.add_argument(
        "--retries",
        type=int,
        metavar="N",
        help="extra attempts after a retryable failure (default: case/profile)",
    )
    run.add_argument(
        "--budget",
        type=float,
        metavar="SECONDS",
        help="wall-clock budget of the run; retries that do not fit are declined",
    )
    run.add_argument(
        "--out",
        type=Path,
        default=Path("reports"),
        metavar="DIR",
        help="where run folders go (default: reports/)",
    )
    run.add_argument("--run-id", metavar="ID", help="name of the run folder (default: time-based)")
    run.add_argument(
        "--code-root",
        action="append",
        dest="code_roots",
        metavar="DIR",
        help="folder put on the workers' sys.path (repeatable; default: targets/tinyav)",
    )
    run.add_argument(
        "--references",
        type=Path,
        default=Path("references"),
        metavar="DIR",
        help="reference store, read-only (default: references/)",
    )
    run.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    run.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    # Imported here, not at the top: `import harness.cli` (the pytest plugin's and --help's
    # path) stays free of numpy and torch.
    from harness.cases import build_plan
    from harness.cli.progress import ProgressDisplay
    from harness.cli.suite import load, platforms
    from harness.execution.run import Runner, RunOptions
    from harness.model import exit_code
    from harness.platforms.profile import resolve_profile
    from harness.report.io import write_run

    for name in ("repeats", "retries"):
        value = getattr(args, name)
        if value is not None and value < (1 if name == "repeats" else 0):
            raise UsageError(
                f"--{name} {value}: expected an integer >= {1 if name == 'repeats' else 0}"
            )
    if args.budget is not None and args.budget <= 0:
        raise UsageError(f"--budget {args.budget}: expected a positive number of seconds")
    profile = resolve_profile(args.runner, Path("runners"))
    suite = load(args.paths)
    for err in suite.errors:
        print(f"error: {err}", file=sys.stderr)
    items = build_plan(suite.cases, platforms(args, profile.platform), args.keyword)
    code_roots = args.code_roots or (["targets/tinyav"] if Path("targets/tinyav").is_dir() else [])
    display = ProgressDisplay(len(items), live=False if args.quiet else None)
    runner = Runner(
        RunOptions(
            profile=profile,
            out_root=args.out,
            run_id=args.run_id,
            code_roots=tuple(str(Path(r).resolve()) for r in code_roots),
            references_root=str(args.references.resolve()) if args.references.is_dir() else None,
            repeats=args.repeats,
            retries=args.retries,
            budget_s=args.budget,
            argv=tuple(sys.argv),
            cwd=str(Path.cwd()),
            progress=None if args.quiet else display.line,
            item_progress=None if args.quiet else display.item,
        )
    )
    print(f"run {runner.run_id}: {len(items)} item(s) -> {runner.run_dir}", file=sys.stderr)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if runner.stop_requested:
            raise KeyboardInterrupt
        print(
            f"\n{signal.Signals(signum).name}: finishing the attempt in flight, then writing "
            "the report (send again to abort now)",
            file=sys.stderr,
        )
        runner.request_stop()

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        with display:
            runner.run_plan(items)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        report = runner.finish(suite.errors)
        write_run(report, runner.run_dir)
    counts = {k: v for k, v in report.counts().items() if v}
    print(
        f"{runner.run_dir}: "
        + ", ".join(f"{v} {k}" for k, v in counts.items())
        + (" (interrupted)" if report.interrupted else ""),
        file=sys.stderr,
    )
    for c in report.cases:
        if c.status not in ("passed", "skipped"):
            print(f"  {c.status:8} {c.name}: {c.reason or ''}", file=sys.stderr)
    simulated = [c for c in report.cases if c.simulated]
    if simulated:
        print(
            f"  {len(simulated)} result(s) on simulated platforms: "
            f"{sorted({c.platform for c in simulated})} (labelled simulated in the report)",
            file=sys.stderr,
        )
    for c in report.cases:
        for check in c.checks:
            if check.passed is None:
                print(f"  not run  {c.name} {check.name}: {check.reason}", file=sys.stderr)
            elif check.passed is False and check.policy == "warn":
                print(
                    f"  warning  {c.name} {check.name}: {check.reason or check.value}",
                    file=sys.stderr,
                )
    for fault in report.infra_errors:
        print(f"  harness  {fault}", file=sys.stderr)
    code = exit_code(report)
    if code == 5:
        why = (
            "no case selected"
            if not report.cases
            else f"all {len(report.cases)} selected case(s) were skipped"
        )
        print(f"nothing ran: {why} (exit 5)", file=sys.stderr)
    return code
