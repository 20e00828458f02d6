"""The ``harness`` command line.

Exit codes: 0 all passed; 1 a check failed or a case failed; 2 usage or input error;
3 infrastructure error; 7 only flaky results.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from harness.cases import LoadResult, load_suite
from harness.errors import HarnessError, UsageError
from harness.progress import ProgressDisplay

RUN_EXAMPLE = """\
examples:
  harness run                                  # every case in cases/ on this runner's platform
  harness run cases/pipeline -k "int8 and not ref" --repeats 3
  harness run --runner h100 --budget 1500 --out reports/
"""


def _common_suite_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="*", type=Path, help="case files or folders (default: cases/)")
    p.add_argument(
        "-k",
        dest="keyword",
        metavar="EXPR",
        help="select cases by a pytest-style expression over their names",
    )
    p.add_argument(
        "--platform",
        action="append",
        dest="platforms",
        metavar="NAME",
        help="platform to run on (repeatable; default: the runner profile's)",
    )
    p.add_argument(
        "--runner",
        metavar="PROFILE",
        help="runner profile name in runners/ or a path to one (default: cpu)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="harness",
        description="CI regression and platform validation harness for diffusion and "
        "video-generation inference stacks.",
        epilog=RUN_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    run = sub.add_parser(
        "run",
        help="run cases and write reports/<run-id>/",
        description="Run cases through persistent workers, check them, write report.json, "
        "junit.xml and summary.md under --out/<run-id>/.",
        epilog=RUN_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _common_suite_args(run)
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

    plan = sub.add_parser(
        "plan",
        help="show what `harness run` would run, without running it",
        epilog="example:\n  harness plan cases/ -k loader",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _common_suite_args(plan)

    report = sub.add_parser(
        "report",
        help="re-render junit.xml and summary.md from a run's report.json",
        epilog="example:\n  harness report reports/latest",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    report.add_argument("run_dir", type=Path, help="a run folder or its report.json")

    from harness import cli_refs

    cli_refs.add_parser(sub)
    return parser


def _load(paths: Sequence[Path]) -> LoadResult:

    return load_suite(list(paths) or [Path("cases")])


def _platforms(args: argparse.Namespace, profile_platform: str) -> list[str]:
    from harness.platforms import REGISTRY

    platforms = list(args.platforms) if args.platforms else [profile_platform]
    for p in platforms:
        if p not in REGISTRY:
            raise UsageError(f"--platform {p}: expected one of {', '.join(sorted(REGISTRY))}")
    return platforms


def cmd_plan(args: argparse.Namespace) -> int:
    from harness.plan import build_plan
    from harness.profile import resolve_profile

    profile = resolve_profile(args.runner, Path("runners"))
    suite = _load(args.paths)
    for err in suite.errors:
        print(f"error: {err}", file=sys.stderr)
    items = build_plan(suite.cases, _platforms(args, profile.platform), args.keyword)
    for item in items:
        c = item.case
        extra = f"  (skipped: {item.skip_reason})" if item.skip_reason else ""
        print(
            f"{item.name}  repeats={c.repeats} warmup={c.warmup} seed={c.seed}"
            f"{' fresh_process' if c.fresh_process else ''}{extra}"
        )
    print(f"{len(items)} item(s), {len(suite.errors)} bad case file(s)", file=sys.stderr)
    return 2 if suite.errors else 0


def cmd_run(args: argparse.Namespace) -> int:
    from harness.plan import build_plan
    from harness.profile import resolve_profile
    from harness.runner import Runner, RunOptions, exit_code

    for name in ("repeats", "retries"):
        value = getattr(args, name)
        if value is not None and value < (1 if name == "repeats" else 0):
            raise UsageError(
                f"--{name} {value}: expected an integer >= {1 if name == 'repeats' else 0}"
            )
    if args.budget is not None and args.budget <= 0:
        raise UsageError(f"--budget {args.budget}: expected a positive number of seconds")
    profile = resolve_profile(args.runner, Path("runners"))
    suite = _load(args.paths)
    for err in suite.errors:
        print(f"error: {err}", file=sys.stderr)
    items = build_plan(suite.cases, _platforms(args, profile.platform), args.keyword)
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
    code = exit_code(report, runner.infra_errors)
    # An interrupted run proves nothing about what it did not run: never exit 0 or 7.
    return 3 if report.interrupted and code in (0, 7) else code


def cmd_report(args: argparse.Namespace) -> int:
    from harness.report_io import read_report, write_run

    report = read_report(args.run_dir)
    run_dir = args.run_dir if args.run_dir.is_dir() else args.run_dir.parent
    write_run(report, run_dir, latest=False)
    print(f"re-rendered {run_dir}", file=sys.stderr)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        if args.command == "run":
            return cmd_run(args)
        if args.command == "plan":
            return cmd_plan(args)
        if args.command == "report":
            return cmd_report(args)
        if args.command == "refs":
            from harness import cli_refs

            return int(cli_refs.main_refs(args))
    except HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    parser.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
