"""``harness report``: re-render a run's, a merged run's or a comparison's renderings from its
JSON (``report.json`` or ``comparison.json``), which it never rewrites."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from harness.errors import UsageError
from harness.report.comparison_io import read_comparison, render_comparison
from harness.report.io import read_report, render_run


def add_parser(sub: Any) -> None:
    report = sub.add_parser(
        "report",
        help="re-render index.html, summary.md and junit.xml from a run's or a comparison's JSON",
        description="Re-render the renderings of a run folder (report.json: index.html, "
        "summary.md, junit.xml), a merged run (the same) or a comparison folder "
        "(comparison.json: index.html, summary.md, and the renderings of its base/ and head/ "
        "runs). Which one is detected from the files present.",
        epilog="examples:\n  harness report reports/latest\n"
        "  harness report reports/<comparison-id> --references references",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    report.add_argument(
        "run_dir",
        type=Path,
        help="a run or comparison folder, or its report.json / comparison.json",
    )
    report.add_argument(
        "--references",
        type=Path,
        default=None,
        help="reference store whose frames the HTML shows (default: references/ if it exists)",
    )
    report.set_defaults(func=main)


def _kind(path: Path) -> tuple[str, Path]:
    """("comparison" | "run", its folder) for a folder or one of its JSON files."""
    if path.is_file():
        if path.name == "comparison.json":
            return "comparison", path.parent
        return "run", path.parent
    if (path / "comparison.json").is_file():
        return "comparison", path
    if (path / "report.json").is_file():
        return "run", path
    if not path.exists():
        raise UsageError(f"{path}: no such folder or file")
    raise UsageError(
        f"{path}: holds neither report.json (a run or merged run) nor comparison.json "
        "(a comparison); pass a folder `harness run`, `harness merge` or `harness compare` wrote"
    )


def main(args: argparse.Namespace) -> int:
    references = args.references if args.references is not None else Path("references")
    if args.references is not None and not references.is_dir():
        raise UsageError(f"--references {references}: that folder does not exist")
    refs = references if references.is_dir() else None
    kind, folder = _kind(args.run_dir)
    # never rewrites the JSON: it is the source, not an output
    if kind == "run":
        render_run(read_report(args.run_dir), folder, references=refs)
        print(f"re-rendered {folder}: index.html, summary.md, junit.xml", file=sys.stderr)
        return 0
    comparison = read_comparison(folder)
    for side in (comparison.base, comparison.head):
        side_path = folder / side.report if side.report else None
        # the side runs this comparison wrote (base/, head/), not saved runs it only read
        if side_path is not None and not Path(side.report or "").is_absolute():
            side_dir = side_path if side_path.is_dir() else side_path.parent
            if (side_dir / "report.json").is_file():
                render_run(read_report(side_dir), side_dir, references=refs)
                print(f"re-rendered {side_dir}: index.html, summary.md, junit.xml", file=sys.stderr)
    render_comparison(comparison, folder, references=refs)
    print(f"re-rendered {folder}: index.html, summary.md", file=sys.stderr)
    return 0
