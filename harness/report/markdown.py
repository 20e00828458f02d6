"""The Markdown summary of a run, for a CI job summary or a PR comment."""

from __future__ import annotations

from harness.model import RunReport


def _cell(text: str) -> str:
    """One table cell: pipes escaped, first line only."""
    lines = text.replace("|", "\\|").splitlines()
    return lines[0] if lines else ""


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
        lines.append(
            f"| `{_cell(c.name)}` | {c.status} | {len(c.attempts)} | {_cell(c.reason or '')} |"
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
