"""``harness plan``: show what ``harness run`` would run, without running it."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from harness.cases import build_plan
from harness.cli.suite import add_suite_args, load, platforms
from harness.platforms.profile import resolve_profile


def add_parser(sub: Any) -> None:
    plan = sub.add_parser(
        "plan",
        help="show what `harness run` would run, without running it",
        epilog="example:\n  harness plan cases/ -k loader",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_suite_args(plan)
    plan.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    profile = resolve_profile(args.runner, Path("runners"))
    suite = load(args.paths)
    for err in suite.errors:
        print(f"error: {err}", file=sys.stderr)
    items = build_plan(suite.cases, platforms(args, profile.platform), args.keyword)
    for item in items:
        c = item.case
        extra = f"  (skipped: {item.skip_reason})" if item.skip_reason else ""
        print(
            f"{item.name}  repeats={c.repeats} warmup={c.warmup} seed={c.seed}"
            f"{' fresh_process' if c.fresh_process else ''}{extra}"
        )
    print(f"{len(items)} item(s), {len(suite.errors)} bad case file(s)", file=sys.stderr)
    if suite.errors:
        return 2
    if not any(item.skip_reason is None for item in items):
        # The same answer `harness run` would give: nothing would run (exit 5), and why.
        why = (
            f"-k {args.keyword!r} matches none of the {len(suite.cases)} case(s)"
            if args.keyword and not items
            else "no case selected"
            if not items
            else f"all {len(items)} selected item(s) would be skipped"
        )
        print(f"nothing would run: {why} (exit 5)", file=sys.stderr)
        return 5
    return 0
