"""``harness explain PATH``: one page ordering a red run's, merged run's or comparison's red
cases by how likely head caused them, each with its evidence (Markdown on stdout; with it,
``explain.md`` and ``explain.html`` in the folder)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from harness.errors import UsageError

EXAMPLE = """\
examples:
  harness explain reports/latest               # a run (or a merged run)
  harness explain reports/<comparison-id>      # a comparison (harness compare writes it too)
  harness explain reports/latest --base main   # a run recorded with --coverage, against main

exit codes: 0 explained (red or not); 2 a path that holds no run or comparison.
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "explain",
        help="order a red run's or comparison's cases by how likely head caused them",
        description="Read a run folder, a merged run or a comparison folder and print one page "
        "(Markdown) that orders its red cases by how likely head caused them: cases that "
        "execute head's changed lines and diverge at a stage first, infrastructure and cases "
        "that execute none of the change last; each with its evidence (new or pre-existing, "
        "infrastructure or code, changed lines executed, first departure from the reference, "
        "environment differences). Also writes explain.md and explain.html in the folder.",
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("path", type=Path, help="a run folder, a merged run or a comparison folder")
    p.add_argument(
        "--base",
        metavar="REV",
        help="a run recorded with --coverage: triage its cases against git diff REV..(its commit)",
    )
    p.add_argument(
        "--repo",
        type=Path,
        default=Path("."),
        metavar="PATH",
        help="the repository of the code under test, for --base (default: this one)",
    )
    p.add_argument(
        "--out", type=Path, metavar="DIR", help="where explain.md/.html go (default: PATH)"
    )
    p.set_defaults(func=main)


def _run_triage(path: Path, base: str, repo: Path) -> tuple[dict[tuple[str, str], Any], str]:
    """Each case of the run at ``path`` triaged against ``git diff base..(the run's commit)``."""
    from harness.compare.diff import changed_lines
    from harness.compare.triage import triage_case
    from harness.report.io import read_report

    report = read_report(path)
    sha = next((c.coverage.rev for c in report.cases if c.coverage and c.coverage.rev), None)
    sha = sha or (report.env.get("git") or {}).get("sha")
    if not sha:
        return {}, "not recorded (the run names no commit to diff against)"
    changes = changed_lines(repo, base, sha)
    if changes.error is not None:
        return {}, f"no diff: {changes.error}"
    return {
        (c.id, c.platform): triage_case(None, c.coverage, changes, sides=("head",))
        for c in report.cases
    }, ""


def main(args: argparse.Namespace) -> int:
    from harness.fsio import write_text_atomic
    from harness.report.explain import explain_run, load_explanation, read_raw
    from harness.report.explain_render import explain_html, explain_markdown
    from harness.report.io import read_report

    path: Path = args.path
    if not path.exists():
        raise UsageError(f"{path}: no such folder or file")
    folder = path.parent if path.is_file() else path
    if args.base is not None:
        if not (folder / "report.json").is_file() or (folder / "comparison.json").is_file():
            raise UsageError(
                "--base REV goes with a run folder (a comparison is triaged when it is made)"
            )
        triage, note = _run_triage(folder, args.base, args.repo)
        if note:
            print(f"error: --base {args.base}: {note}", file=sys.stderr)
        explained = explain_run(
            read_report(folder), read_raw(folder / "report.json"), str(folder), triage, note
        )
    else:
        explained = load_explanation(path)
    page = explain_markdown(explained)
    sys.stdout.write(page)
    out = args.out or folder
    try:
        out.mkdir(parents=True, exist_ok=True)
        write_text_atomic(out / "explain.md", page)
        write_text_atomic(out / "explain.html", explain_html(explained))
        print(f"{out / 'explain.html'}", file=sys.stderr)
    except OSError as exc:
        print(f"error: cannot write explain.md/.html in {out}: {exc}", file=sys.stderr)
    return 0
