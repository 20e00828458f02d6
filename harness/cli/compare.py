"""``harness compare``: base vs head on this runner (or two saved runs), one verdict per case."""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.cli.suite import add_suite_args
from harness.cli.usage import writable_folder
from harness.compare.sequential import looks_up_to
from harness.errors import UsageError

if TYPE_CHECKING:
    from harness.model import Comparison

COMPARE_EXAMPLE = """\
examples:
  harness compare --base main --head HEAD                 # every case, this repository
  harness compare --base v1.2 --head HEAD -k t2va-int8 --rounds 7 --budget 600
  harness compare --base main --head HEAD --repo ../my-target --code-root src
  harness compare --aa main                                # calibrate this runner's noise
  harness compare reports/run-a reports/run-b              # two saved runs
  harness compare --base-env .venv-torch212 --head-env .venv-torch213 cases/pipeline
  harness compare --base-env /usr/bin/python3.11 --head-env .venv/bin/python --rev v1.2

two environments: --base-env/--head-env each name a Python interpreter or a virtual
environment folder (its bin/python); the working tree (or --rev REV, checked out once) runs
in both, interleaved, and comparison.json adds env_diff (packages added, removed, changed,
and the Python version when it differs). Each environment must be able to import the harness
(install it there, or create the venv with --system-site-packages over one that has it).

exit codes: 0 no regression or new failure; 1 a regression or new failure (with --strict
also inconclusive, suspect, flaky, missing); 2 usage; 3 infrastructure.
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "compare",
        help="compare base and head on this runner (interleaved rounds)",
        description="Check both revisions out as git worktrees, run the selected cases for both "
        "interleaved (A B B A) on this runner, and write <out>/<id>/comparison.json and "
        "summary.md beside base/ and head/ run folders. With --base-env/--head-env, run one "
        "revision in two Python environments instead. With two saved run folders and no "
        "--base/--head, compare those instead.",
        epilog=COMPARE_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_suite_args(p)
    p.add_argument("--base", metavar="REV", help="base revision (any git revision)")
    p.add_argument("--head", metavar="REV", help="head revision (default: HEAD)")
    p.add_argument("--aa", metavar="REV", help="run REV against itself and store its noise")
    p.add_argument(
        "--base-env",
        metavar="PATH",
        help="base's Python: an interpreter or a virtual environment folder (with --head-env)",
    )
    p.add_argument(
        "--head-env",
        metavar="PATH",
        help="head's Python: an interpreter or a virtual environment folder (with --base-env)",
    )
    p.add_argument(
        "--rev",
        metavar="REV",
        help="with --base-env/--head-env: the revision both run (default: the working tree)",
    )
    p.add_argument(
        "--repo",
        type=Path,
        default=Path("."),
        metavar="PATH",
        help="repository of the code under test (default: this one)",
    )
    p.add_argument(
        "--code-root",
        action="append",
        dest="code_roots",
        metavar="DIR",
        help="import root relative to the repository (repeatable; default: targets/tinyav where "
        "the repository has it, else none: the cases' own code_root)",
    )
    p.add_argument(
        "--cases-from",
        choices=("working", "head"),
        default="working",
        help="case files from the working copy (default) or from head's checkout (with "
        "--base-env/--head-env: from the checkout under test)",
    )
    p.add_argument("--rounds", type=int, metavar="N", help="most rounds per batch (default 7)")
    p.add_argument("--budget", type=float, metavar="SECONDS", help="time budget for rounds")
    p.add_argument(
        "--delta", type=float, metavar="FRACTION", help="latency margin (default 0.05 = 5 %%)"
    )
    p.add_argument(
        "--min-stage-ms",
        type=float,
        default=10.0,
        metavar="MS",
        help="stages shorter than this on both sides are reported, not judged (default 10)",
    )
    p.add_argument(
        "--reuse-workers",
        action="store_true",
        help="one worker per side for the whole comparison instead of a fresh pair per round: "
        "faster, but a process's own speed then biases every round (for comparisons whose "
        "subject is not latency)",
    )
    p.add_argument(
        "--runs-per-round",
        type=int,
        metavar="N",
        help="measured runs of each case per side in every round, alternating A B B A ...; the "
        "round's median is its one sample (default 3 with a fresh pair per round, 1 with "
        "--reuse-workers)",
    )
    p.add_argument(
        "--no-coverage",
        action="store_true",
        help="no coverage attempts: skip the diff-aware triage of cases that are not no_change",
    )
    p.add_argument("--strict", action="store_true", help="inconclusive and suspect fail too")
    p.add_argument(
        "--no-confirm", action="store_true", help="do not confirm regressions with a fresh batch"
    )
    p.add_argument(
        "--allow-different-env",
        action="store_true",
        help="compare saved runs whose environments differ",
    )
    p.add_argument("--out", type=Path, default=Path("reports"), metavar="DIR")
    p.add_argument("--id", dest="comparison_id", metavar="ID", help="name of the output folder")
    p.add_argument(
        "--references", type=Path, default=Path("references"), metavar="DIR", help="references"
    )
    p.add_argument(
        "--noise-dir",
        type=Path,
        default=Path("runners/noise"),
        metavar="DIR",
        help="where --aa writes calibrated noise and comparisons read it; a folder in the "
        "repository is read from base's checkout, never head's (default: runners/noise)",
    )
    p.add_argument(
        "--noise-max-age",
        type=float,
        default=30.0,
        metavar="DAYS",
        help="calibration older than this is reported stale in every latency verdict (30)",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=main)


def default_code_roots(repo: Path) -> list[str]:
    """The bundled target's import root where the repository has one (this repository, a copy
    of it), else none: a project of its own names its import roots per case (``code_root``)."""
    return ["targets/tinyav"] if (repo / "targets" / "tinyav").is_dir() else []


def runs_per_round_arg(n: int | None) -> int | None:
    """``--runs-per-round``, checked (None: the default for the worker mode)."""
    if n is not None and not 1 <= n <= 50:
        raise UsageError(f"--runs-per-round {n}: expected an integer from 1 to 50")
    return n


def looks_for(rounds: int | None) -> tuple[int, ...]:
    """``--rounds``: where a batch looks (:func:`harness.compare.sequential.looks_up_to`);
    out of range, a usage error."""
    try:
        return looks_up_to(rounds)
    except ValueError as exc:
        raise UsageError(f"--rounds {rounds}: {exc}") from None


def _interruptible(run: Callable[[], Comparison]) -> Comparison:
    """``run()`` with SIGINT and SIGTERM raised as Ctrl-C: a live comparison still writes what
    finished. SIGINT too, explicitly: a shell without job control starts a background command
    with SIGINT ignored, and Python then leaves it ignored."""

    def on_signal(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        return run()
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


def main(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from harness.compare.latency import LatencySettings
    from harness.compare.run import CompareRequest, compare_revisions
    from harness.compare.saved import compare_reports
    from harness.platforms.profile import resolve_profile
    from harness.report.github import publish_comparison

    if args.budget is not None and args.budget <= 0:
        raise UsageError(f"--budget {args.budget}: expected a positive number of seconds")
    if args.min_stage_ms < 0:
        raise UsageError(f"--min-stage-ms {args.min_stage_ms}: expected a non-negative number")
    if not args.noise_max_age > 0:
        raise UsageError(f"--noise-max-age {args.noise_max_age}: expected a positive number")
    if args.delta is not None and not 0 < args.delta < 10:
        raise UsageError(f"--delta {args.delta}: expected a fraction such as 0.05")
    writable_folder("--out", args.out)
    profile = resolve_profile(args.runner, Path("runners"))
    delta = args.delta if args.delta is not None else (profile.compare_delta or 0.05)
    say = (lambda _l: None) if args.quiet else (lambda line: print(line, file=sys.stderr))
    request = CompareRequest(
        repo=args.repo,
        case_paths=tuple(args.paths),
        keyword=args.keyword,
        platforms=tuple(args.platforms or ()),
        cases_from=args.cases_from,
        code_roots=tuple(args.code_roots or default_code_roots(args.repo)),
        out_root=args.out,
        comparison_id=args.comparison_id,
        profile=profile,
        references_root=args.references,
        latency=LatencySettings(
            delta=delta,
            looks=looks_for(args.rounds),
            confirm=not args.no_confirm,
            min_stage_s=args.min_stage_ms / 1e3,
        ),
        quality_margins=dict(profile.compare_margins),
        budget_s=args.budget,
        worker_per_round=not args.reuse_workers,
        runs_per_round=runs_per_round_arg(args.runs_per_round),
        noise_dir=args.noise_dir,
        noise_max_age_days=args.noise_max_age,
        argv=tuple(sys.argv),
        progress=say,
        coverage=not args.no_coverage,
    )
    envs = (args.base_env, args.head_env)
    if any(e is not None for e in envs):
        if None in envs:
            raise UsageError(
                "--base-env and --head-env go together: pass both (each a Python interpreter "
                "or a virtual environment folder)"
            )
        if args.base or args.head or args.aa:
            raise UsageError(
                "--base-env/--head-env run one revision in two environments: drop "
                "--base/--head/--aa (pick the revision with --rev REV)"
            )
    elif args.rev is not None:
        raise UsageError(
            "--rev REV goes with --base-env/--head-env (two revisions: --base REV --head REV)"
        )
    if args.base_env is not None:
        from harness.compare.envs import compare_environments

        comparison = _interruptible(
            lambda: compare_environments(
                args.base_env, args.head_env, request=request, rev=args.rev
            )
        )
    elif args.base is None and args.head is None and args.aa is None:
        if len(args.paths) != 2 or not all(p.is_dir() for p in args.paths):
            raise UsageError(
                "expected --base REV [--head REV], --aa REV, or two saved run folders "
                "(BASE_DIR HEAD_DIR)"
            )
        comparison = compare_reports(
            args.paths[0],
            args.paths[1],
            request=replace(request, case_paths=()),
            allow_different_env=args.allow_different_env,
        )
    else:
        if args.aa is not None and (args.base or args.head):
            raise UsageError("--aa REV runs one revision against itself: drop --base/--head")
        if args.aa is None and args.base is None:
            raise UsageError("--head needs --base REV")
        if args.aa is not None:
            comparison = _interruptible(
                lambda: compare_revisions(args.aa, args.aa, request=request, aa=True)
            )
        else:
            comparison = _interruptible(
                lambda: compare_revisions(args.base, args.head or "HEAD", request=request)
            )
    out_dir = args.out / comparison.id
    for c in comparison.cases:
        print(f"  {c.verdict:20} {c.name}" + (f": {c.reason}" if c.reason else ""), file=sys.stderr)
        if c.triage:
            print(f"  {'':20} triage: {c.triage.get('summary')}", file=sys.stderr)
    for e in comparison.infra_errors:
        print(f"  harness  {e}", file=sys.stderr)
    counts = ", ".join(f"{v} {k}" for k, v in comparison.counts().items() if v)
    print(f"{out_dir}/comparison.json: {counts}", file=sys.stderr)
    # GitHub Actions: the job summary (GITHUB_STEP_SUMMARY) and ::error annotations.
    publish_comparison(comparison, out_dir)
    return comparison.exit_code(strict=args.strict)
