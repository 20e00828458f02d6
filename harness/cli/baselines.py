"""``harness baselines propose``: latency budgets for a runner class from the history, as a
reviewable diff of its profile (``runners/<profile>.toml``)."""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import Any

from harness.errors import UsageError

PROPOSE_EXAMPLE = """\
A stage is budgeted from at least --min-runs of the newest --runs green runs (passed, not
flaky) whose medians agree (max/min <= --max-spread): the largest median x (1 + REL) + PAD,
rounded up to two significant digits, commented with the run ids it came from. REL and PAD
come from the first --tolerance whose glob matches the stage (default *=0.10,0.005). An
existing budget may be lowered, never raised unless --allow-raise --reason TEXT; what would
have been raised is listed with why. Prints the diff; --write applies it.

examples:
  harness baselines propose --db history.db --runner cpu
  harness baselines propose --db history.db --runner h100 --tolerance 'Load*=0.5,0.05' --write
  harness baselines propose --db history.db --runner cpu --allow-raise --reason "torch 2.13"
"""


def add_parser(sub: Any) -> None:
    raw = argparse.RawDescriptionHelpFormatter
    p = sub.add_parser(
        "baselines",
        help="propose latency budgets from the history",
        description="Latency budgets from data (harness history ingest).",
        epilog="examples:\n  harness baselines propose --db history.db --runner cpu\n",
        formatter_class=raw,
    )
    p.set_defaults(func=lambda _a: _help(p))
    bsub = p.add_subparsers(dest="baselines_command", metavar="SUBCOMMAND")
    pr = bsub.add_parser(
        "propose",
        help="write proposed [budgets] for a runner class as a diff of its profile",
        description="Propose [budgets] for a runner class from its green runs in the history.",
        epilog=PROPOSE_EXAMPLE,
        formatter_class=raw,
    )
    pr.add_argument("--db", type=Path, required=True, metavar="PATH", help="history database")
    pr.add_argument(
        "--runner", required=True, metavar="PROFILE", help="runner profile name or path"
    )
    pr.add_argument("--runs", type=int, default=5, metavar="N", help="newest green runs (5)")
    pr.add_argument("--min-runs", type=int, default=3, metavar="N", help="at least (3)")
    pr.add_argument(
        "--max-spread", type=float, default=1.25, metavar="RATIO", help="max/min (1.25)"
    )
    pr.add_argument(
        "--min-seconds",
        type=float,
        default=0.01,
        metavar="S",
        help="stages faster than this are not budgeted (0.01)",
    )
    pr.add_argument(
        "--tolerance",
        action="append",
        default=[],
        metavar="GLOB=REL,PAD",
        help="relative tolerance and absolute pad (s) for stages matching GLOB (repeatable, "
        "first match wins; default *=0.10,0.005)",
    )
    pr.add_argument("--allow-raise", action="store_true", help="raise budgets the data exceed")
    pr.add_argument("--reason", metavar="TEXT", help="why raising is right (with --allow-raise)")
    pr.add_argument("--write", action="store_true", help="apply the diff to the profile")
    pr.set_defaults(func=main_propose)


def _help(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def main_propose(args: argparse.Namespace) -> int:
    from harness.fsio import write_text_atomic
    from harness.history.baselines import Rule, Settings, propose
    from harness.history.db import open_db
    from harness.platforms.profile import resolve_profile

    if args.allow_raise and not (args.reason or "").strip():
        raise UsageError("--allow-raise needs --reason TEXT (recorded beside each raised budget)")
    if args.reason and not args.allow_raise:
        raise UsageError("--reason is for --allow-raise")
    if args.min_runs < 1 or args.runs < args.min_runs or args.max_spread < 1:
        raise UsageError("expected --min-runs >= 1, --runs >= --min-runs, --max-spread >= 1")
    rules = (*(Rule.parse(t) for t in args.tolerance), Rule("*", 0.10, 0.005))
    profile = resolve_profile(args.runner, Path("runners"))
    settings = Settings(
        runs=args.runs,
        min_runs=args.min_runs,
        max_spread=args.max_spread,
        min_seconds=args.min_seconds,
        rules=rules,
        allow_raise=args.allow_raise,
        reason=args.reason or "",
    )
    with contextlib.closing(open_db(args.db, create=False)) as db:
        plan = propose(db, profile, settings)
    diff = plan.diff()
    sys.stdout.write(diff or f"no change to {plan.profile}\n")
    written = [p for p in plan.proposals if p.action in ("add", "lower", "raise")]
    say = lambda line: print(line, file=sys.stderr)  # noqa: E731
    say(
        f"{plan.profile}: {len(written)} budget(s) proposed ("
        + ", ".join(
            f"{sum(p.action == a for p in plan.proposals)} {a}"
            for a in ("add", "lower", "raise", "keep")
        )
        + ")"
    )
    for p in plan.would_raise:
        say(
            f"would raise budgets.{p.case_id}.{p.stage} from {p.existing:g} to {p.value:g} s: "
            f"the largest median of {', '.join(p.runs)} is {p.largest:.4g} s; not raised "
            "(--allow-raise --reason TEXT to raise it)"
        )
    for line in plan.skipped:
        say(f"skipped {line}")
    if args.write and diff:
        write_text_atomic(plan.profile, plan.new)
        say(f"wrote {plan.profile}")
    return 0
