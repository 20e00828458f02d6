"""Writing and reading run folders: ``report.json``, ``junit.xml``, ``summary.md``,
``index.html`` (and its ``images/``), ``latest``.

Every file is written under a temporary name and renamed, so a reader never sees half a file.
"""

from __future__ import annotations

import os
from pathlib import Path

from harness.errors import ReportFormatError
from harness.fsio import write_json_atomic, write_text_atomic
from harness.model import SCHEMA_VERSION, RunReport
from harness.report.junit import write_junit
from harness.report.markdown import summary_markdown
from harness.report.schema import read_document, validate_report


def _point_latest(run_dir: Path) -> None:
    latest = run_dir.parent / "latest"
    if latest.exists() and not latest.is_symlink():
        return  # a real folder of that name is not ours to replace (run ids never say latest)
    tmp = run_dir.parent / f".latest-{os.getpid()}"
    try:
        if tmp.is_symlink() or tmp.exists():
            tmp.unlink()
        tmp.symlink_to(run_dir.name, target_is_directory=True)
        os.replace(tmp, latest)
    except OSError:  # a filesystem without symlinks: a plain file naming the run
        tmp.unlink(missing_ok=True)
        write_text_atomic(run_dir.parent / "LATEST", run_dir.name + "\n")


def write_run(
    report: RunReport, run_dir: Path, *, latest: bool = True, references: Path | None = None
) -> None:
    """Write every rendering of a run into its folder (``references``: the store whose frames
    ``index.html`` shows beside the outputs)."""
    # one line (the C encoder): a run of 2,000 cases spent 2 s indenting it
    write_json_atomic(run_dir / "report.json", report.to_json(), indent=None)
    render_run(report, run_dir, references=references)
    if latest:
        _point_latest(run_dir)


def render_run(report: RunReport, run_dir: Path, *, references: Path | None = None) -> None:
    """The renderings of a report (JUnit, Markdown, HTML), never the report itself. Each is
    built in memory before it replaces its file, so a rendering that fails leaves the old files
    (the HTML's images are written as its page is built)."""
    summary = summary_markdown(report)
    # imported here: Jinja2, numpy and the reference store stay out of `import harness.cli`
    # and of loading the pytest plugin
    from harness.report.html import render_run_html

    page = render_run_html(report, run_dir, references=references)
    write_junit(report, run_dir / "junit.xml")
    write_text_atomic(run_dir / "summary.md", summary)
    write_text_atomic(run_dir / "index.html", page)


def read_report(path: Path) -> RunReport:
    """Load a report.json (or the run folder holding one), checking its format version."""
    doc = read_document(
        path,
        file_name="report.json",
        noun="report",
        version=SCHEMA_VERSION,
        redo="re-run the cases with this harness version",
        validate=validate_report,
    )
    try:
        return RunReport.from_json(doc)
    except (KeyError, TypeError, ValueError) as exc:
        raise ReportFormatError(f"{path}: malformed report: missing or bad {exc}") from exc
