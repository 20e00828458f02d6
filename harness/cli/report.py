"""``harness report``: re-render a run's renderings from its ``report.json``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from harness.report.io import read_report, render_run


def add_parser(sub: Any) -> None:
    report = sub.add_parser(
        "report",
        help="re-render junit.xml and summary.md from a run's report.json",
        epilog="example:\n  harness report reports/latest",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    report.add_argument("run_dir", type=Path, help="a run folder or its report.json")
    report.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    report = read_report(args.run_dir)
    run_dir = args.run_dir if args.run_dir.is_dir() else args.run_dir.parent
    render_run(report, run_dir)  # never rewrites report.json: it is the source, not an output
    print(f"re-rendered {run_dir}", file=sys.stderr)
    return 0
