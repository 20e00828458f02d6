"""The Markdown summary of a run, for a CI job summary or a PR comment.

Every value put in the table goes through :func:`_cell` (or :func:`_code`): whatever a report
holds, a row keeps its four cells and the table stays one table.
"""

from __future__ import annotations

import re

from harness.model import RunReport


def _one_line(text: str) -> str:
    """``text`` on one line: every line break (any of str.splitlines') becomes a space."""
    return " ".join(part.strip() for part in text.splitlines() if part.strip())


def _cell(text: str, *, first_line: bool = False) -> str:
    """One table cell: on one line (with ``first_line``, only the first non-blank line and a
    mark that more follows), pipes escaped."""
    flat = _one_line(text)
    if first_line and len(text.strip().splitlines()) > 1:
        flat = text.strip().splitlines()[0].strip() + " ..."
    return flat.replace("|", "\\|")


def _code(text: str, *, table: bool = True) -> str:
    """A code span (in a table cell by default): fenced by more backticks than any run inside
    it, so a backtick in a name cannot end the span early."""
    flat = _cell(text) if table else _one_line(text)
    fence = "`" * (max((len(run) for run in re.findall(r"`+", flat)), default=0) + 1)
    pad = " " if flat.startswith("`") or flat.endswith("`") else ""
    return f"{fence}{pad}{flat}{pad}{fence}"


def summary_markdown(report: RunReport) -> str:
    """A short Markdown summary, for CI step summaries and PR comments."""
    counts = {k: v for k, v in report.counts().items() if v}
    n_warn = sum(len(c.warnings) for c in report.cases)
    n_sim = sum(1 for c in report.cases if c.simulated)
    lines = [
        f"# Run {_one_line(report.run_id)}" + (" (interrupted)" if report.interrupted else ""),
        "",
        f"runner {_code(report.runner, table=False)}, "
        + (", ".join(f"{v} {k}" for k, v in counts.items()) or "no cases")
        + (f", {n_warn} warning{'s' if n_warn != 1 else ''}" if n_warn else "")
        + (f", {n_sim} on simulated platforms" if n_sim else ""),
        "",
        "| case | status | attempts | note |",
        "| --- | --- | --- | --- |",
    ]
    for c in report.cases:
        note = c.reason or ""
        if c.warnings:
            warned = f"{len(c.warnings)} warning{'s' if len(c.warnings) != 1 else ''}"
            note = f"{warned}; {note}" if note else warned
        lines.append(
            f"| {_code(c.name)} | {_cell(c.status)} | {len(c.attempts)} "
            f"| {_cell(note, first_line=True)} |"
        )
    warnings = [
        f"- {_code(c.name, table=False)} {_one_line(k.name)}: "
        + _one_line(k.reason or f"{k.value} (want {k.op} {k.threshold})")
        + (
            f" (policy warn: {_one_line(str(k.settings['on_fail_rule']))})"
            if k.settings.get("on_fail_rule")
            else " (policy warn)"
        )
        for c in report.cases
        for k in c.warnings
    ]
    if warnings:
        lines += ["", "Warnings (a warn policy reports these; the case still passes):", *warnings]
    not_run = [
        f"- {_code(c.name, table=False)} {_one_line(k.name)}: {_one_line(k.reason or '')}"
        for c in report.cases
        for k in c.checks
        if k.passed is None
    ]
    if not_run:
        lines += ["", "Checks not run:", *not_run]
    return "\n".join(lines) + "\n"
