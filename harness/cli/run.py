"""``harness run``: run cases through persistent workers and write ``reports/<run-id>/``."""

from __future__ import annotations

import argparse
import math
import os
import signal
import sys
from dataclasses import replace
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from harness.cli.sharding import add_split_args, check_split_args
from harness.cli.suite import add_suite_args
from harness.cli.usage import existing_folders, writable_folder
from harness.errors import UsageError

if TYPE_CHECKING:
    from harness.model import RunReport
    from harness.platforms.profile import Profile

RUN_EXAMPLE = """\
examples:
  harness run                                  # every case in cases/ on this runner's platform
  harness run cases/pipeline -k "int8 and not ref" --repeats 3
  harness run --runner h100 --budget 1500 --out reports/
  harness run --shuffle 1234                   # same cases, a seeded random order
  harness run -k t2va-int8 --explain           # where each run first left its reference
  harness run --shard 2/4 --durations prev/report.json --fail-fast   # one CI machine's part
  harness run --shard auto --out /runs     # index and count from Buildkite, GitLab, k8s, ...
  harness run --coverage                       # + one coverage attempt per case, after its runs
  harness run --changed-since main --coverage-from main-run/   # only cases the change touches
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
        metavar="DIR",
        help="reference store, read-only (default: references/ when that folder exists)",
    )
    run.add_argument(
        "--shuffle",
        type=int,
        metavar="SEED",
        help="run the cases in a random order drawn from SEED (each case's attempts stay "
        "together), to check that no result depends on the cases before it",
    )
    run.add_argument(
        "--shard",
        metavar="I/N|auto",
        help="run only part I of the plan split over N machines by expected duration "
        "(1-based; see `harness plan --shards N`); merge the parts with `harness merge`. "
        "auto: I and N from the CI engine's variables (GitHub Actions via HARNESS_SHARD_INDEX/"
        "HARNESS_SHARD_COUNT, Buildkite, GitLab, Kubernetes Indexed Jobs, Slurm arrays)",
    )
    add_split_args(run)
    run.add_argument(
        "--fail-fast",
        action="store_true",
        help="stop starting cases after the first failed, error, timeout or crashed one; "
        "the report lists the cases not run, with why",
    )
    run.add_argument(
        "--simulate",
        action="store_true",
        help="run a runner profile that promises devices (device_count >= 1) simulated when "
        "its platform is not available here (without it that run is refused, exit 3)",
    )
    run.add_argument(
        "--explain",
        action="store_true",
        help="compare every attempt with its layered reference (inputs, then each "
        "fingerprinted layer) and report where it first left it; without it only attempts "
        "whose quality checks failed are compared",
    )
    run.add_argument(
        "--coverage",
        action="store_true",
        help="after each case's timed attempts, one coverage attempt recording the lines of its "
        "code roots (and coverage_packages) it executed (report.json: cases[].coverage)",
    )
    run.add_argument(
        "--changed-since",
        metavar="REV",
        help="run only the cases whose recorded coverage (--coverage-from) touches a file "
        "changed since REV; cases with no coverage on record always run",
    )
    run.add_argument(
        "--coverage-from",
        type=Path,
        metavar="REPORT",
        help="a run folder (or its report.json) recorded with --coverage at REV",
    )
    run.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    run.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    # Imported here, not at the top: `import harness.cli` (the pytest plugin's and --help's
    # path) stays free of numpy and torch.
    from harness.cases import build_plan
    from harness.cases.plan import shuffle_plan
    from harness.cases.shard_env import resolve_shard
    from harness.cli.progress import ProgressDisplay
    from harness.cli.refs import bless_hints
    from harness.cli.sharding import shard_plan
    from harness.cli.suite import load, platforms
    from harness.execution.run import Runner, RunOptions, prestart
    from harness.model import exit_code
    from harness.model.layers import case_layers
    from harness.platforms.profile import resolve_profile
    from harness.report.github import publish_run
    from harness.report.io import write_run
    from harness.report.text import contention_figures

    _check_args(args)
    shard_spec = resolve_shard(args.shard, os.environ) if args.shard is not None else None
    check_split_args(args, shard_spec is not None, "--shard I/N")
    references = args.references if args.references is not None else Path("references")
    profile = resolve_profile(args.runner, Path("runners"))
    on = platforms(args, profile.platform)
    code_roots = args.code_roots or (["targets/tinyav"] if Path("targets/tinyav").is_dir() else [])
    where = RunOptions(
        profile=profile,
        code_roots=tuple(str(Path(r).resolve()) for r in code_roots),
        cwd=str(Path.cwd()),
    )
    # The first worker's zygote imports torch while the cases load and the plan is made.
    prestart(where, on[0])
    suite = load(args.paths)
    for err in suite.errors:
        print(f"error: {err}", file=sys.stderr)
    items = build_plan(suite.cases, on, args.keyword)
    if args.shuffle is not None:
        items = shuffle_plan(items, args.shuffle)
    shard = None
    if shard_spec is not None:
        split = shard_plan(args, items, shard_spec.count)
        shard = split.info(shard_spec.index, shard_spec.source)
        items = split.items_of(shard_spec.index)
        print(
            f"shard {shard.label}: {len(items)} of {len(split.items)} item(s), "
            f"expected {split.loads()[shard_spec.index - 1]:.2f} s, plan {split.digest}"
            + (f", nonce {split.nonce}" if split.nonce else "")
            + (f" ({shard_spec.source})" if shard_spec.source != "given" else ""),
            file=sys.stderr,
        )
    selection = None
    if args.changed_since is not None:
        items, selection = _select(items, args.changed_since, args.coverage_from)
    if not args.simulate and any(i.platform == profile.platform for i in items):
        _check_promised_devices(profile, code_roots)
    display = ProgressDisplay(len(items), live=False if args.quiet else None)
    runner = Runner(
        replace(
            where,
            out_root=args.out,
            run_id=args.run_id,
            references_root=str(references.resolve()) if references.is_dir() else None,
            repeats=args.repeats,
            retries=args.retries,
            budget_s=args.budget,
            argv=tuple(sys.argv),
            progress=None if args.quiet else display.line,
            item_progress=None if args.quiet else display.item,
            fail_fast=args.fail_fast,
            shard=shard,
            explain=args.explain,
            coverage=args.coverage,
            selection=selection,
        )
    )
    order = f", shuffled with seed {args.shuffle}" if args.shuffle is not None else ""
    print(f"run {runner.run_id}: {len(items)} item(s){order} -> {runner.run_dir}", file=sys.stderr)

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
        write_run(report, runner.run_dir, references=references if references.is_dir() else None)
    # A repeated infrastructure failure opens the result: it is not the code's failure.
    for finding in report.infrastructure:
        print(finding.line(), file=sys.stderr)
    counts = {k: v for k, v in report.counts().items() if v}
    print(
        f"{runner.run_dir}: "
        + (", ".join(f"{v} {k}" for k, v in counts.items()) or "no cases")
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
            elif check.contention:
                print(
                    f"  contention {c.name} {check.name}: {contention_figures(check)} "
                    "(other processes' load: not failed)",
                    file=sys.stderr,
                )
    for c in report.cases:
        layers = case_layers(c.attempts)
        if layers is not None and (args.explain or c.status != "passed"):
            print(f"  layers   {c.name}: {layers.summary}", file=sys.stderr)
    for m in report.missing:
        print(f"  missing  {m.name}: {m.reason}", file=sys.stderr)
    for line in bless_hints(report, runner.run_dir, args.references):
        print(f"  {line}", file=sys.stderr)
    for fault in report.infra_errors:
        print(f"  harness  {fault}", file=sys.stderr)
    # GitHub Actions: the job summary (GITHUB_STEP_SUMMARY) and ::error annotations.
    publish_run(report, lines={c.id: c.line for c in suite.cases})
    code = exit_code(report)
    if code == 5:
        print(
            f"nothing ran: {_nothing_ran(args, len(suite.cases), report)} (exit 5)", file=sys.stderr
        )
    return code


def _select(items: list[Any], rev: str, coverage_from: Path | None) -> tuple[list[Any], Any]:
    """--changed-since: the items to run, and the selection record (printed: what was left
    out and why; a selection that cannot be made is an error line and every case runs)."""
    from harness.compare.select import select_changed
    from harness.execution.coverage import git_root

    repo, _ = git_root(Path.cwd())
    sel: dict[str, Any]
    if repo is None:
        sel = {
            "changed_since": rev,
            "coverage_from": str(coverage_from) if coverage_from else None,
            "applied": False,
            "error": f"--changed-since {rev}: {Path.cwd()} is not in a git repository",
            "kept": [],
            "left_out": [],
        }
        kept = items
    else:
        kept, sel = select_changed(items, rev, coverage_from, repo)
    if sel["error"]:
        print(f"error: {sel['error']}; running every selected case", file=sys.stderr)
        return kept, sel
    print(
        f"--changed-since {rev}: {len(kept)} of {len(items)} item(s) run, "
        f"{len(sel['left_out'])} left out",
        file=sys.stderr,
    )
    for entry in sel["left_out"]:
        print(f"  left out {entry['name']}: {entry['why']}", file=sys.stderr)
    return kept, sel


def _check_args(args: argparse.Namespace) -> None:
    """Usage errors before anything runs or is written, each as one line (exit 2)."""
    from harness.execution.run import check_run_id
    from harness.model.vocab import MAX_REPEATS, MAX_RETRIES

    for name, lowest, highest in (("repeats", 1, MAX_REPEATS), ("retries", 0, MAX_RETRIES)):
        value = getattr(args, name)
        if value is not None and not lowest <= value <= highest:
            raise UsageError(f"--{name} {value}: expected an integer from {lowest} to {highest}")
    if args.budget is not None and not 0 < args.budget < math.inf:
        raise UsageError(f"--budget {args.budget}: expected a finite positive number of seconds")
    if args.run_id is not None:
        check_run_id(args.run_id)
    if args.code_roots:
        existing_folders("--code-root", args.code_roots)
    if args.coverage_from is not None and args.changed_since is None:
        raise UsageError("--coverage-from REPORT goes with --changed-since REV")
    writable_folder("--out", args.out)
    if args.references is not None and not args.references.is_dir():
        what = "is not a folder" if args.references.exists() else "does not exist"
        raise UsageError(f"--references {args.references}: that folder {what}")


def _check_promised_devices(profile: Profile, code_roots: list[str]) -> None:
    """A profile that promises devices on a platform that is not here (absent, or its runtime
    broken) is an infrastructure error, before anything runs; --simulate lifts it."""
    import os

    from harness.errors import InfrastructureError
    from harness.platforms.devices import count_devices, promised_but_absent

    if profile.device_count < 1:
        return
    env = dict(os.environ)
    paths = [*(str(Path(r).resolve()) for r in code_roots), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(x for x in paths if x)
    found = count_devices(profile.platform, env=env)
    line = promised_but_absent(profile.source, profile.platform, profile.device_count, found)
    if line is not None:
        raise InfrastructureError(line)


def _nothing_ran(args: argparse.Namespace, loaded: int, report: RunReport) -> str:
    """Why a run that ran no attempt ran none."""
    if report.cases:
        reasons = sorted({c.reason or "no reason recorded" for c in report.cases})
        return f"all {len(report.cases)} selected case(s) were skipped: " + "; ".join(reasons)
    where = " ".join(str(p) for p in args.paths) or "cases"
    if report.shard is not None and loaded:
        return (
            f"shard {report.shard.label} has no case: the split put all "
            f"{len(report.shard.plan)} planned case(s) on other shards"
        )
    if not loaded:
        return f"no case loaded from {where}"
    if args.keyword:
        return f"-k {args.keyword!r} matched none of the {loaded} case(s) loaded from {where}"
    return f"no case selected from the {loaded} case(s) loaded from {where}"
