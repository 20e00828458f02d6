"""Writing and reading run folders: ``report.json``, ``junit.xml``, ``summary.md``,
``index.html`` (and its ``images/``), ``latest``.

Every file is written under a temporary name and renamed, so a reader never sees half a file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from harness.errors import ReportFormatError
from harness.fsio import write_json_atomic, write_text_atomic
from harness.model import SCHEMA_VERSION, RunReport
from harness.report.junit import write_junit
from harness.report.markdown import summary_markdown
from harness.report.schema import validate_report


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
    write_json_atomic(run_dir / "report.json", report.to_json())
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


_JSON_TYPES = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}


def read_report(path: Path) -> RunReport:
    """Load a report.json (or the run folder holding one), checking its format version."""
    if path.is_dir():
        path = path / "report.json"
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ReportFormatError(f"{path}: no such report") from exc
    except UnicodeDecodeError as exc:
        raise ReportFormatError(f"{path}: not a report: not UTF-8 text ({exc.reason})") from exc
    except OSError as exc:
        raise ReportFormatError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except json.JSONDecodeError as exc:
        raise ReportFormatError(f"{path}: not valid JSON: {exc}") from exc
    if not isinstance(doc, dict):
        kind = _JSON_TYPES.get(type(doc), "number")
        raise ReportFormatError(f"{path}: not a report: expected a JSON object, got {kind}")
    version = doc.get("schema_version")
    if version != SCHEMA_VERSION:
        raise ReportFormatError(
            f"{path}: schema_version {version!r} is not supported (expected {SCHEMA_VERSION}); "
            "re-run the cases with this harness version"
        )
    # Every key checked against the published schema: an unknown status or field is an error
    # here, not a rendering that silently drops it.
    try:
        validate_report(doc)
    except ReportFormatError as exc:
        raise ReportFormatError(f"{path}: {str(exc).removeprefix('report: ')}") from None
    try:
        return RunReport.from_json(doc)
    except (KeyError, TypeError, ValueError) as exc:
        raise ReportFormatError(f"{path}: malformed report: missing or bad {exc}") from exc
