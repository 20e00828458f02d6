"""Reading ``comparison.json`` and writing its renderings (``summary.md``, ``index.html``).

Example::

    comparison = read_comparison(Path("reports/<id>"))
    render_comparison(comparison, Path("reports/<id>"), references=Path("references"))
"""

from __future__ import annotations

from pathlib import Path

from harness.errors import ReportFormatError
from harness.fsio import write_text_atomic
from harness.model import COMPARISON_SCHEMA_VERSION, Comparison
from harness.report.comparison_md import comparison_markdown
from harness.report.schema import read_document, validate_comparison


def read_comparison(path: Path) -> Comparison:
    """Load a comparison.json (or the folder holding one), checked against its schema."""
    doc = read_document(
        path,
        file_name="comparison.json",
        noun="comparison",
        version=COMPARISON_SCHEMA_VERSION,
        redo="re-run the comparison with this harness version",
        validate=validate_comparison,
    )
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
    from harness.report.explain import explain_comparison, side_reports
    from harness.report.explain_render import explain_html, explain_markdown
    from harness.report.html_compare import render_comparison_html

    page = render_comparison_html(comparison, out_dir, references=references)
    # the explain page (harness explain) of the comparison, appended to its summary
    explained = explain_comparison(comparison, side_reports(comparison, out_dir), str(out_dir))
    explain_md = explain_markdown(explained)
    write_text_atomic(out_dir / "summary.md", summary.rstrip("\n") + "\n\n" + explain_md)
    write_text_atomic(out_dir / "index.html", page)
    write_text_atomic(out_dir / "explain.md", explain_md)
    write_text_atomic(out_dir / "explain.html", explain_html(explained))
