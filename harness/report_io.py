"""Writing and reading run folders: ``report.json``, ``junit.xml``, ``summary.md``, ``latest``.

Every file is written under a temporary name and renamed, so a reader never sees half a file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from harness.errors import ReportFormatError
from harness.model import SCHEMA_VERSION, RunReport, json_safe


def write_json_atomic(path: Path, doc: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(
        json.dumps(json_safe(doc), indent=2, allow_nan=False, default=str) + "\n", encoding="utf-8"
    )
    os.replace(tmp, path)


def _point_latest(run_dir: Path) -> None:
    latest = run_dir.parent / "latest"
    tmp = run_dir.parent / f".latest-{os.getpid()}"
    try:
        if tmp.is_symlink() or tmp.exists():
            tmp.unlink()
        tmp.symlink_to(run_dir.name, target_is_directory=True)
        os.replace(tmp, latest)
    except OSError:  # a filesystem without symlinks: a plain file naming the run
        (run_dir.parent / "LATEST").write_text(run_dir.name + "\n")


def summary_markdown(report: RunReport) -> str:
    """A short Markdown summary, for CI step summaries and PR comments."""
    counts = {k: v for k, v in report.counts().items() if v}
    lines = [
        f"# Run {report.run_id}" + (" (interrupted)" if report.interrupted else ""),
        "",
        f"runner `{report.runner}`, " + ", ".join(f"{v} {k}" for k, v in counts.items()),
        "",
        "| case | status | attempts | note |",
        "| --- | --- | --- | --- |",
    ]
    for c in report.cases:
        note = (c.reason or "").replace("|", "\\|").splitlines()
        lines.append(
            f"| `{c.kind}/{c.id}[{c.platform}]` | {c.status} | {len(c.attempts)} | "
            f"{note[0] if note else ''} |"
        )
    not_run = [
        f"- `{c.name}` {k.name}: {k.reason}"
        for c in report.cases
        for k in c.checks
        if k.passed is None
    ]
    if not_run:
        lines += ["", "Checks not run:", *not_run]
    return "\n".join(lines) + "\n"


def write_run(report: RunReport, run_dir: Path, *, latest: bool = True) -> None:
    """Write every rendering of a run into its folder."""
    doc = report.to_json()
    write_json_atomic(run_dir / "report.json", doc)
    from harness.junit import write_junit

    write_junit(report, run_dir / "junit.xml")
    tmp = run_dir / "summary.md.tmp"
    tmp.write_text(summary_markdown(report), encoding="utf-8")
    os.replace(tmp, run_dir / "summary.md")
    if latest:
        _point_latest(run_dir)


def read_report(path: Path) -> RunReport:
    """Load a report.json (or the run folder holding one), checking its format version."""
    if path.is_dir():
        path = path / "report.json"
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ReportFormatError(f"{path}: no such report") from exc
    except json.JSONDecodeError as exc:
        raise ReportFormatError(f"{path}: not valid JSON: {exc}") from exc
    version = doc.get("schema_version")
    if version != SCHEMA_VERSION:
        raise ReportFormatError(
            f"{path}: schema_version {version!r} is not supported (expected {SCHEMA_VERSION}); "
            "re-run the cases with this harness version"
        )
    try:
        return RunReport.from_json(doc)
    except (KeyError, TypeError) as exc:
        raise ReportFormatError(f"{path}: malformed report: missing or bad {exc}") from exc
