"""GitHub Actions: the job summary and annotations of a run or a comparison.

- When ``GITHUB_STEP_SUMMARY`` names a file, ``summary.md`` is appended to it (never
  overwritten), sized to the room GitHub's 1 MiB limit leaves; a write that fails is a warning,
  never a lost run.
- Under GitHub Actions (``GITHUB_ACTIONS=true``) each case that needs attention is a workflow
  command on stdout, ``::error file=cases/x.toml,line=12,title=loader/x[cpu]::message``
  (``::warning`` for flaky and warn-policy results), pointing at the case's table in its file
  (relative to ``GITHUB_WORKSPACE`` when set). GitHub shows 10 annotations of a level per step:
  the worst 10 are printed, and a notice says how many more there are.

Messages and properties are escaped by GitHub's rules (``%``, CR, LF; in properties also ``:``
and ``,``), so no text from a case or an error can end a command or start another.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TextIO

from harness.cases.lines import case_lines
from harness.errors import ReportFormatError
from harness.model import CaseResult, Comparison, RunReport, fmt_number
from harness.model.comparison import BLOCKING
from harness.model.layers import case_layers
from harness.report.comparison_md import comparison_markdown, explain_case_comparison
from harness.report.io import read_report
from harness.report.markdown import (
    DEFAULT_MAX_BYTES,
    STEP_SUMMARY_LIMIT,
    attention_cases,
    failing_check,
    problem_text,
    summary_markdown,
)
from harness.report.text import explain_checks

MAX_ANNOTATIONS = 10  # GitHub shows at most 10 error and 10 warning annotations per step
MESSAGE_LINES = 30  # longest annotation message, in lines
_MIN_ROOM = 4096  # below this much room left in the step summary, append nothing

Level = Literal["error", "warning", "notice"]


def escape_data(text: str) -> str:
    """A workflow command's message: ``%``, CR and LF percent-encoded."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A workflow command's property value: as :func:`escape_data`, plus ``:`` and ``,``."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


@dataclass(frozen=True)
class Annotation:
    """One annotation: ``::level file=...,line=...,title=...::message``."""

    level: Level
    message: str
    title: str = ""
    file: str | None = None
    line: int | None = None

    def command(self) -> str:
        props = []
        if self.file:
            props.append(f"file={escape_property(self.file)}")
            if self.line:
                props.append(f"line={self.line}")
        if self.title:
            props.append(f"title={escape_property(self.title)}")
        head = f"::{self.level}" + (" " + ",".join(props) if props else "")
        return f"{head}::{escape_data(self.message)}"

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Annotation:
        return cls(d["level"], d["message"], d.get("title", ""), d.get("file"), d.get("line"))


def in_github_actions(environ: Mapping[str, str]) -> bool:
    return environ.get("GITHUB_ACTIONS") == "true"


def annotation_path(source: str, workspace: str | None) -> str:
    """``source`` as GitHub wants it: relative to ``workspace`` when it lies inside it."""
    if not workspace:
        return source
    path = Path(source)
    try:
        absolute = path if path.is_absolute() else Path.cwd() / path
        return absolute.resolve().relative_to(Path(workspace).resolve()).as_posix()
    except (OSError, ValueError):
        return source


class _Lines:
    """Case id -> line of its table, from the loaded cases when given, else from the file."""

    def __init__(self, known: Mapping[str, int] | None) -> None:
        self.known = dict(known or {})
        self.files: dict[str, dict[str, int]] = {}

    def __call__(self, case_id: str, source: str) -> int | None:
        if self.known.get(case_id):
            return self.known[case_id]
        if source not in self.files:
            try:
                self.files[source] = case_lines(Path(source).read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError):
                self.files[source] = {}
        return self.files[source].get(case_id) or None


def _clip_lines(text: str) -> str:
    lines = text.splitlines()
    if len(lines) <= MESSAGE_LINES:
        return text
    return "\n".join([*lines[:MESSAGE_LINES], f"... ({len(lines) - MESSAGE_LINES} more lines)"])


def _case_message(kind: str, case: CaseResult) -> str:
    head = case.status + (" (simulated)" if case.simulated else "")
    if kind == "warn":
        head += " with a warning"
    elif kind == "contention":
        head += " under contention (a latency budget met only without run-queue delay)"
    check = failing_check(case)
    if check is not None:
        obtained = "not run" if check.passed is None else f"obtained {fmt_number(check.value)}"
        head += f": {check.name} {obtained}, required {check.op} {fmt_number(check.threshold)}"
    checks = explain_checks(case.checks)
    problem = problem_text(case)
    if problem.startswith("CheckFailed:") and checks:
        problem = ""  # the check table below says it better
    lines = [head] + ([problem] if problem else [])
    layers = case_layers(case.attempts)
    if layers is not None:  # where the run first left its layered reference, before the table
        lines.append(f"reference layers: {layers.summary}")
    if checks:
        lines += ["", checks]
    return _clip_lines("\n".join(lines))


def run_annotations(
    report: RunReport,
    *,
    lines: Mapping[str, int] | None = None,
    workspace: str | None = None,
) -> list[Annotation]:
    """Annotations for a run, worst first: errors for failing cases, case files that did not
    load, harness faults and repeated infrastructure failures (one each, "infrastructure:
    HTTP 403 on <url> (N cases, M attempts); not a code failure"); warnings for flaky and
    warn-policy results; notices for latency budgets met only under contention (with their
    figures). ``lines`` maps case
    ids to the line of their table (the loaded cases know it); ids not in it are looked up in
    their case file."""
    line_of = _Lines(lines)
    out: list[Annotation] = []
    for e in report.load_errors:
        at = re.search(r"at line (\d+)", e.message)
        out.append(
            Annotation(
                "error",
                e.message,
                "case file did not load",
                annotation_path(e.path, workspace),
                int(at.group(1)) if at else None,
            )
        )
    out += [Annotation("error", fault, "harness error") for fault in report.infra_errors]
    # a repeated infrastructure failure is one finding, named once, before the cases it failed
    out += [Annotation("error", f.line(), "infrastructure") for f in report.infrastructure]
    for kind, case in attention_cases(report):
        if kind == "simulated":
            continue  # labelled in the summary; not a failure to point at
        level: Level = "warning" if kind in ("flaky", "warn") else "error"
        if kind == "contention":
            level = "notice"
        out.append(
            Annotation(
                level,
                _case_message(kind, case),
                case.name,
                annotation_path(case.source, workspace) if case.source else None,
                line_of(case.id, case.source) if case.source else None,
            )
        )
    return out


def comparison_annotations(
    comparison: Comparison,
    *,
    sources: Mapping[str, tuple[str, int | None]] | None = None,
    workspace: str | None = None,
) -> list[Annotation]:
    """Errors for regressions, new failures and cases not comparable; warnings for flaky and
    suspect ones. ``sources`` maps case ids to (case file, line)."""
    sources = sources or {}
    out = [Annotation("error", e, "harness error") for e in comparison.infra_errors]
    for c in comparison.cases:
        if c.verdict in BLOCKING:
            level: Level = "error"
        elif c.verdict in ("flaky", "suspect"):
            level = "warning"
        else:
            continue
        source, line = sources.get(c.id, (None, None))
        out.append(
            Annotation(
                level,
                _clip_lines(explain_case_comparison(c)),
                c.name,
                annotation_path(source, workspace) if source else None,
                line,
            )
        )
    return sorted(out, key=lambda a: a.level != "error")


def format_annotations(
    annotations: Iterable[Annotation], *, cap: int = MAX_ANNOTATIONS
) -> list[str]:
    """The workflow commands: at most ``cap`` per level, in the order given, then one notice
    that says how many were left out."""
    shown: dict[str, int] = {}
    left: dict[str, int] = {}
    out: list[str] = []
    for a in annotations:
        if shown.get(a.level, 0) < cap:
            shown[a.level] = shown.get(a.level, 0) + 1
            out.append(a.command())
        else:
            left[a.level] = left.get(a.level, 0) + 1
    if left:
        more = " and ".join(f"{n} more {level}(s)" for level, n in sorted(left.items()))
        out.append(
            Annotation(
                "notice",
                f"{more} not annotated (GitHub shows {cap} per step): every case is in the "
                "job summary and in summary.md / report.json of the run folder",
                "harness",
            ).command()
        )
    return out


def append_step_summary(render: Callable[[int], str], environ: Mapping[str, str]) -> str | None:
    """Append ``render(max_bytes)`` to the file ``GITHUB_STEP_SUMMARY`` names, with
    ``max_bytes`` what GitHub's 1 MiB limit leaves after what the file already holds. Returns
    a warning when nothing could be appended (never raises for the file), else None."""
    path = environ.get("GITHUB_STEP_SUMMARY")
    if not path:
        return None
    try:
        used = os.path.getsize(path)
    except FileNotFoundError:
        used = 0
    except OSError as exc:
        return f"GITHUB_STEP_SUMMARY {path}: cannot read its size: {exc.strerror or exc}"
    room = STEP_SUMMARY_LIMIT - used - 2
    if room < _MIN_ROOM:
        return (
            f"GITHUB_STEP_SUMMARY {path}: already {used:,} bytes, no room left under "
            "GitHub's 1 MiB limit: summary not appended (it is in the run folder's summary.md)"
        )
    text = render(min(DEFAULT_MAX_BYTES, room))
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(("\n" if used else "") + text)
    except OSError as exc:
        return f"GITHUB_STEP_SUMMARY {path}: cannot append the summary: {exc.strerror or exc}"
    return None


def append_run_summary(report: RunReport, environ: Mapping[str, str]) -> str | None:
    """Append a run's summary to ``GITHUB_STEP_SUMMARY`` (see :func:`append_step_summary`)."""
    return append_step_summary(lambda n: summary_markdown(report, max_bytes=n), environ)


def run_commands(
    runs: Iterable[tuple[RunReport, Mapping[str, int] | None]], environ: Mapping[str, str]
) -> list[str]:
    """The annotation commands of one or more runs (say, one per xdist worker), capped
    together; none outside GitHub Actions. Each run comes with its case id -> line map."""
    if not in_github_actions(environ):
        return []
    workspace = environ.get("GITHUB_WORKSPACE")
    found = [a for r, lines in runs for a in run_annotations(r, lines=lines, workspace=workspace)]
    return format_annotations(found)


def publish_run(
    report: RunReport,
    *,
    lines: Mapping[str, int] | None = None,
    environ: Mapping[str, str] | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> None:
    """The job summary and the annotations of a run, where GitHub Actions reads them."""
    env = os.environ if environ is None else environ
    warning = append_run_summary(report, env)
    if warning:
        print(f"warning: {warning}", file=err or sys.stderr)
    for command in run_commands([(report, lines)], env):
        print(command, file=out or sys.stdout)


def append_comparison_summary(
    comparison: Comparison, environ: Mapping[str, str], explain: str = ""
) -> str | None:
    """Append a comparison's summary to ``GITHUB_STEP_SUMMARY``, followed by its explain page
    (``explain``, as ``summary.md`` has it) where both fit."""

    def text(limit: int) -> str:
        md = comparison_markdown(comparison, max_bytes=limit)
        both = md.rstrip("\n") + "\n\n" + explain
        return both if explain and len(both.encode()) <= limit else md

    return append_step_summary(text, environ)


def comparison_commands(
    comparison: Comparison, out_dir: Path, environ: Mapping[str, str]
) -> list[str]:
    """The annotation commands of a comparison written to ``out_dir`` (case files and lines
    from head's report, when it can be read); none outside GitHub Actions."""
    if not in_github_actions(environ):
        return []
    sources: dict[str, tuple[str, int | None]] = {}
    head = _head_report(comparison, out_dir)
    line_of = _Lines(None)
    for case in head.cases if head else ():
        if case.source:
            sources[case.id] = (case.source, line_of(case.id, case.source))
    workspace = environ.get("GITHUB_WORKSPACE")
    return format_annotations(
        comparison_annotations(comparison, sources=sources, workspace=workspace)
    )


def publish_comparison(
    comparison: Comparison,
    out_dir: Path,
    *,
    environ: Mapping[str, str] | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> None:
    """The job summary and the annotations of a comparison, where GitHub Actions reads them."""
    env = os.environ if environ is None else environ
    page = out_dir / "explain.md"  # harness explain's page, written with the comparison
    explain = page.read_text(encoding="utf-8") if page.is_file() else ""
    warning = append_comparison_summary(comparison, env, explain)
    if warning:
        print(f"warning: {warning}", file=err or sys.stderr)
    for command in comparison_commands(comparison, out_dir, env):
        print(command, file=out or sys.stdout)


def _head_report(comparison: Comparison, out_dir: Path) -> RunReport | None:
    """Head's report: its path is relative to ``comparison.json`` (or, for two saved runs, as
    given on the command line); None when neither reads."""
    if not comparison.head.report:
        return None
    for candidate in (out_dir / comparison.head.report, Path(comparison.head.report)):
        try:
            return read_report(candidate)
        except ReportFormatError:
            continue
    return None
