"""Reading ``comparison.json`` and writing its renderings (``summary.md``, ``index.html``).

Example::

    comparison = read_comparison(Path("reports/<id>"))
    render_comparison(comparison, Path("reports/<id>"), references=Path("references"))
"""

from __future__ import annotations

import json
from pathlib import Path

from harness.errors import ReportFormatError
from harness.fsio import write_text_atomic
from harness.model import COMPARISON_SCHEMA_VERSION, Comparison
from harness.report.comparison_md import comparison_markdown
from harness.report.schema import validate_comparison


def read_comparison(path: Path) -> Comparison:
    """Load a comparison.json (or the folder holding one), checked against its schema."""
    if path.is_dir():
        path = path / "comparison.json"
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ReportFormatError(f"{path}: no such comparison") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ReportFormatError(f"{path}: cannot read: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise ReportFormatError(f"{path}: not valid JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise ReportFormatError(f"{path}: not a comparison: expected a JSON object")
    version = doc.get("schema_version")
    if version != COMPARISON_SCHEMA_VERSION:
        raise ReportFormatError(
            f"{path}: schema_version {version!r} is not supported (expected "
            f"{COMPARISON_SCHEMA_VERSION}); re-run the comparison with this harness version"
        )
    try:
        validate_comparison(doc)
    except ReportFormatError as exc:
        raise ReportFormatError(f"{path}: {str(exc).removeprefix('comparison: ')}") from None
    try:
        return Comparison.from_json(doc)
    except (KeyError, TypeError, ValueError) as exc:
        raise ReportFormatError(f"{path}: malformed comparison: missing or bad {exc}") from exc


def render_comparison(
    comparison: Comparison, out_dir: Path, *, references: Path | None = None
) -> None:
    """``summary.md`` and ``index.html`` of a comparison, each built before it is written."""
    summary = comparison_markdown(comparison)
    # imported here: Jinja2, numpy and the reference store stay out of `import harness.cli`
    # and of loading the pytest plugin
    from harness.report.html_compare import render_comparison_html

    page = render_comparison_html(comparison, out_dir, references=references)
    write_text_atomic(out_dir / "summary.md", summary)
    write_text_atomic(out_dir / "index.html", page)
