"""``harness bisect``: the first bad commit of one case, judged by the comparison engine."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Any

from harness.cli.usage import writable_folder
from harness.errors import UsageError

BISECT_EXAMPLE = """\
examples:
  harness bisect --good v1.2 --bad HEAD t2va-int8
  harness bisect --good main~20 --bad main --repo ../my-target --code-root src t2va-int8

A step is bad when the case fails or regresses against the good commit; commits that do not
build (code roots missing, SyntaxError/ImportError) and steps that decide nothing (flaky,
suspect, missing, not comparable, an incomplete comparison) are skipped, never good, and
recorded in bisect.json. Each bisect writes its own folder under --out.
exit codes: 0 first bad commit found; 1 none found (or hidden by skipped commits); 2 usage;
3 interrupted (Ctrl-C: bisect.json keeps the steps so far) or a harness fault.
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "bisect",
        help="find the first commit where a case fails or regresses",
        description="Binary search over the commits between --good and --bad, comparing each "
        "step against --good on this runner with the same verdict engine as `harness compare`.",
        epilog=BISECT_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("case", metavar="CASE", help="case id (or display name) to bisect")
    p.add_argument(
        "--cases",
        action="append",
        dest="paths",
        type=Path,
        default=[],
        metavar="PATH",
        help="case files or folders (repeatable; default: cases/)",
    )
    p.add_argument("--platform", action="append", dest="platforms", metavar="NAME")
    p.add_argument("--runner", metavar="PROFILE", help="runner profile (default: cpu)")
    p.add_argument("--good", required=True, metavar="REV")
    p.add_argument("--bad", required=True, metavar="REV")
    p.add_argument("--repo", type=Path, default=Path("."), metavar="PATH")
    p.add_argument("--code-root", action="append", dest="code_roots", metavar="DIR")
    p.add_argument("--rounds", type=int, metavar="N", help="most rounds per batch (default 7)")
    p.add_argument("--delta", type=float, metavar="FRACTION", help="latency margin")
    p.add_argument(
        "--reuse-workers",
        action="store_true",
        help="one worker per side per step instead of a fresh pair per round (faster; for a "
        "search whose subject is a failure, not latency)",
    )
    p.add_argument(
        "--runs-per-round",
        type=int,
        metavar="N",
        help="measured runs of the case per side in every round (default 3 with a fresh pair "
        "per round, 1 with --reuse-workers)",
    )
    p.add_argument("--out", type=Path, default=Path("reports"), metavar="DIR")
    p.add_argument("--references", type=Path, default=Path("references"), metavar="DIR")
    p.add_argument("--noise-dir", type=Path, default=Path("runners/noise"), metavar="DIR")
    p.add_argument("-q", "--quiet", action="store_true")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from harness.cli.compare import default_code_roots, looks_for, runs_per_round_arg
    from harness.compare.bisect import BisectInterrupted, bisect, evidence
    from harness.compare.latency import LatencySettings
    from harness.compare.run import CompareRequest
    from harness.platforms.profile import resolve_profile

    profile = resolve_profile(args.runner, Path("runners"))
    writable_folder("--out", args.out)
    _check_case(args, profile.platform)
    say = (lambda _l: None) if args.quiet else (lambda line: print(line, file=sys.stderr))
    request = CompareRequest(
        repo=args.repo,
        case_paths=tuple(args.paths),
        platforms=tuple(args.platforms or ()),
        code_roots=tuple(args.code_roots or default_code_roots(args.repo)),
        out_root=args.out,
        profile=profile,
        references_root=args.references,
        latency=LatencySettings(
            delta=args.delta if args.delta is not None else (profile.compare_delta or 0.05),
            looks=looks_for(args.rounds),
        ),
        quality_margins=dict(profile.compare_margins),
        worker_per_round=not args.reuse_workers,
        runs_per_round=runs_per_round_arg(args.runs_per_round),
        noise_dir=args.noise_dir,
        argv=tuple(sys.argv),
        progress=lambda line: say(f"  {line}") if line.startswith(("bisect", "compare")) else None,
    )
    stop = {"asked": False}

    def on_signal(signum: int, frame: FrameType | None) -> None:
        # the step in flight catches this, judges and writes what ran; the search then stops
        stop["asked"] = True
        raise KeyboardInterrupt

    old = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        result = bisect(
            args.good,
            args.bad,
            args.case,
            request=request,
            say=say,
            interrupted=lambda: stop["asked"],
        )
    except BisectInterrupted as exc:
        _print_steps(exc.result.steps)
        print(
            f"bisect interrupted after {len(exc.result.steps)} step(s); steps so far in "
            f"{exc.out / 'bisect.json'} (exit 3)",
            file=sys.stderr,
        )
        return 3
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
    _print_steps(result.steps)
    if result.first_bad is None:
        if result.candidates:
            print(
                "first bad commit is one of (skipped commits hide it): "
                + ", ".join(c[:12] for c in result.candidates)
            )
        else:
            print(f"no bad commit: {args.case} neither fails nor regresses up to {args.bad}")
        return 1
    step = evidence(result)
    print(f"first bad commit: {result.first_bad}")
    if step is not None:
        print(f"  {step.subject}")
        print(f"  verdict: {step.verdict}: {step.reason}")
        print(f"  evidence: {step.comparison}/comparison.json")
    return 0


def _print_steps(steps: Any) -> None:
    for s in steps:
        print(f"  {s.status:5} {s.sha[:12]} {s.subject}: {s.verdict or '-'}", file=sys.stderr)


def _check_case(args: argparse.Namespace, default_platform: str) -> None:
    """The case to bisect must be one the case files name: a usage error before any step."""
    from harness.cases import build_plan, load_suite

    paths = list(args.paths) or [Path("cases")]
    suite = load_suite(paths)
    items = build_plan(suite.cases, list(args.platforms or [default_platform]))
    if any(args.case == c.id for c in suite.cases) or any(args.case == i.name for i in items):
        return
    where = ", ".join(str(p) for p in paths)
    known = sorted({c.id for c in suite.cases})
    shown = ", ".join(known[:8]) + (", ..." if len(known) > 8 else "")
    bad = f"; {len(suite.errors)} case file(s) failed to load" if suite.errors else ""
    raise UsageError(
        f"CASE {args.case!r}: no such case id in {where} ({len(known)} case(s): {shown}{bad})"
    )
