"""The Markdown summary of a run (``summary.md``), for a CI job summary or a PR comment.

It opens with a one-line verdict, then a table of the cases that need attention (failed, error,
timeout, crashed, missing, budget declined, flaky, a warn-policy check, a pass only on a
simulated platform) with the failing check's obtained value against its threshold and the first
line of the error; every timed-out attempt's hang diagnosis follows (:mod:`harness.report.
hang_md`); every other case sits in a collapsed ``<details>`` table.

Every string taken from a report goes through :func:`md_text` or :func:`md_code`: a case named
``<script>`` stays text, a ``|`` cannot split a cell, a line break cannot end a row. The whole
document stays under ``max_bytes`` (GitHub's 1 MiB step-summary limit by default): rows that do
not fit are left out and a last line says how many and where the full list is.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable

from harness.model import CaseResult, CheckResult, ErrorInfo, RunReport, exit_code, fmt_number
from harness.model.infra import describe

# GitHub refuses a step summary over 1 MiB; keep a margin for what else a step appends.
STEP_SUMMARY_LIMIT = 1024 * 1024
DEFAULT_MAX_BYTES = STEP_SUMMARY_LIMIT - 16 * 1024
CELL_CHARS = 200  # longest error line shown in a cell

# Characters Markdown or HTML read as markup; ``_`` only where it can open or close emphasis
# (not inside a word, so ``pre_existing_failure`` stays readable in the raw file).
_MD_SPECIAL = re.compile(r"([\\`*\[\]<>|~&#!]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9]))")
_STATUS_ORDER = ("crashed", "timeout", "error", "failed", "missing", "budget_declined", "flaky")
_ICON = {
    "crashed": "❌",
    "timeout": "❌",
    "error": "❌",
    "failed": "❌",
    "missing": "❔",
    "budget_declined": "⏳",
    "flaky": "⚠️",
    "warn": "⚠️",
    "contention": "⏱️",
    "simulated": "🧪",
}
_VERDICT_ICON = {0: "✅", 1: "❌", 2: "❌", 3: "🛑", 5: "⚪", 7: "⚠️"}


def one_line(text: str) -> str:
    """``text`` on one line: every line break (any of str.splitlines') becomes a space."""
    return " ".join(part.strip() for part in text.splitlines() if part.strip())


def first_line(text: str) -> str:
    """The first non-blank line of ``text``, with `` ...`` when more lines follow."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    return lines[0] + (" ..." if len(lines) > 1 else "")


def _clip(text: str, limit: int | None) -> str:
    return text if limit is None or len(text) <= limit else text[: limit - 1] + "…"


def md_text(text: object, *, limit: int | None = None) -> str:
    """Plain text for Markdown (a table cell or a list item): one line, every character that
    Markdown or HTML would read as markup backslash-escaped (``<script>`` stays text, ``|``
    cannot split a cell)."""
    return _MD_SPECIAL.sub(r"\\\1", _clip(one_line(str(text)), limit))


def md_code(text: object, *, table: bool = True, limit: int | None = None) -> str:
    """A code span (in a table cell by default): one line, fenced by more backticks than any
    run inside it, so a backtick in a name cannot end the span early; in a table ``|`` is
    escaped (GitHub and CommonMark tables unescape it inside code too)."""
    flat = _clip(one_line(str(text)), limit)
    if table:
        flat = flat.replace("|", "\\|")
    fence = "`" * (max((len(run) for run in re.findall(r"`+", flat)), default=0) + 1)
    pad = " " if flat.startswith("`") or flat.endswith("`") else ""
    return f"{fence}{pad}{flat}{pad}{fence}"


def row(cells: Iterable[str]) -> str:
    """One table row of already escaped cells."""
    return "| " + " | ".join(cells) + " |"


class Budget:
    """A Markdown document that stays under ``max_bytes`` (UTF-8): lines are added while they
    fit, keeping ``reserve`` bytes for what must close the document (a ``</details>``, the
    truncation note); ``left_out`` counts the rows that did not fit."""

    NOTE_RESERVE = 600

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.lines: list[str] = []
        self.size = 0
        self.left_out = 0

    def fits(self, line: str, reserve: int = NOTE_RESERVE) -> bool:
        return self.size + len(line.encode()) + 1 + reserve <= self.max_bytes

    def add(self, line: str, reserve: int = NOTE_RESERVE) -> bool:
        """Add ``line`` when it fits; else count it as left out."""
        if self.left_out or not self.fits(line, reserve):
            self.left_out += 1
            return False
        self.force(line)
        return True

    def force(self, line: str) -> None:
        """Add ``line`` whatever its size (the verdict line, closing tags, the note)."""
        self.lines.append(line)
        self.size += len(line.encode()) + 1

    def table(self, header: str, rows: Iterable[str], reserve: int = NOTE_RESERVE) -> None:
        """A header, its separator and as many rows as fit (none: no table, all left out)."""
        rows = list(rows)
        separator = "|" + "---|" * header.count(" | ") + "---|"
        if not rows:
            return
        if self.left_out or not self.fits(header + "\n" + separator + "\n" + rows[0], reserve):
            self.left_out += len(rows)
            return
        self.force(header)
        self.force(separator)
        for r in rows:
            self.add(r, reserve)

    def text(self, where: str) -> str:
        """The document, with the truncation note when rows were left out."""
        lines = list(self.lines)
        if self.left_out:
            lines += [
                "",
                f"**Truncated:** {self.left_out} more row(s) not shown, to keep this summary "
                f"under {self.max_bytes:,} bytes (GitHub's step-summary limit is 1 MiB); "
                f"the full list is in {where}.",
            ]
        return "\n".join(lines) + "\n"


def duration_text(started_at: str, finished_at: str) -> str | None:
    """``2m31s`` between two ISO times; None when either does not parse."""
    try:
        secs = (
            dt.datetime.fromisoformat(finished_at) - dt.datetime.fromisoformat(started_at)
        ).total_seconds()
    except (TypeError, ValueError):
        return None
    if secs < 0:
        return None
    if secs < 60:
        return f"{secs:.1f}s"
    minutes, s = divmod(round(secs), 60)
    if minutes < 60:
        return f"{minutes}m{s:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def _status_counts(cases: Iterable[CaseResult]) -> list[tuple[str, int]]:
    """(status, count) pairs, worst status first."""
    counts: dict[str, int] = {}
    for c in cases:
        counts[c.status] = counts.get(c.status, 0) + 1
    order = (*_STATUS_ORDER, "skipped", "passed")
    rank = {s: i for i, s in enumerate(order)}
    return sorted(counts.items(), key=lambda kv: rank.get(kv[0], len(_STATUS_ORDER)))


def verdict_line(report: RunReport) -> str:
    """``❌ 2 failed, 1 flaky, 45 passed on cpu (3 simulated) in 2m31s``."""
    code = exit_code(report)
    counts = ", ".join(f"{n} {s.replace('_', ' ')}" for s, n in _status_counts(report.cases))
    line = f"{_VERDICT_ICON.get(code, '❌')} {counts or 'no cases'}"
    platforms = sorted({c.platform for c in report.cases})
    if platforms:
        line += " on " + ", ".join(md_text(p) for p in platforms)
    simulated = sum(c.simulated for c in report.cases)
    if simulated:
        line += f" ({simulated} simulated)"
    took = duration_text(report.started_at, report.finished_at)
    if took:
        line += f" in {took}"
    contended = sum(1 for c in report.cases if c.status == "passed" and c.contention)
    if contended:
        line += f"; {contended} passed under contention"
    if report.load_errors:
        line += f"; {len(report.load_errors)} case file(s) did not load"
    if report.missing:
        line += f"; {len(report.missing)} planned case(s) missing"
    if report.interrupted:
        line += "; interrupted, incomplete"
    elif report.infra_errors:
        line += "; harness errors, incomplete"
    return line


def md_signature(signature: str) -> str:
    """An infrastructure signature as Markdown: ``HTTP 403 on `<url>```, the target in code."""
    text = describe(signature)
    target = signature.rpartition(" ")[2]
    if " " in signature and text.endswith(target):
        return f"{md_text(text[: -len(target)])} {md_code(target, table=False)}"
    return md_text(text)


def infrastructure_lines(report: RunReport) -> list[str]:
    """One line per infrastructure finding, the document's first lines: ``infrastructure: HTTP
    403 on `<url>` (4 cases, 9 attempts); not a code failure``."""
    out = []
    for f in report.infrastructure:
        text = md_signature(f.signature)
        n, k = len(f.cases), f.attempts
        out.append(
            f"infrastructure: {text} ({n} case{'s' * (n != 1)}, {k} attempt{'s' * (k != 1)}); "
            "not a code failure"
        )
    return out


def _context_line(report: RunReport) -> str:
    parts = [f"run {md_code(report.run_id, table=False)}"]
    if report.runner:
        parts.append(f"runner {md_code(report.runner, table=False)}")
    git = report.env.get("git")
    if isinstance(git, dict) and git.get("sha"):
        parts.append(
            f"git {md_code(str(git['sha'])[:12], table=False)}"
            + (" (dirty)" if git.get("dirty") else "")
        )
    host = report.env.get("runner_name") or report.env.get("hostname")
    if host:
        parts.append(f"host {md_code(host, table=False)}")
    return " · ".join(parts)


def attention_kind(case: CaseResult) -> str | None:
    """Why a case needs a person's attention (its status, ``warn``, ``contention``: a latency
    budget met only once run-queue delay was taken out, or ``simulated``), or None."""
    if case.status not in ("passed", "skipped"):
        return case.status
    if case.status == "passed" and any(
        k.policy == "warn" and k.passed is not True for k in case.checks
    ):
        return "warn"
    if case.status == "passed" and case.contention:
        return "contention"
    if case.status == "passed" and case.simulated:
        return "simulated"
    return None


def attention_cases(report: RunReport) -> list[tuple[str, CaseResult]]:
    """The cases that need attention, worst first (by status), each with its kind."""
    order = (*_STATUS_ORDER, "warn", "contention", "simulated")
    found = [(kind, c) for c in report.cases if (kind := attention_kind(c)) is not None]
    rank = {s: i for i, s in enumerate(order)}
    return sorted(found, key=lambda kc: rank.get(kc[0], len(_STATUS_ORDER)))


def failing_check(case: CaseResult) -> CheckResult | None:
    """The check that explains the case best: a failed blocking one, else one that could not
    run, else a warning, else a budget met only under contention."""
    for wanted in (
        lambda k: k.blocking,
        lambda k: k.unjudged,
        lambda k: k.passed is False,
        lambda k: k.passed is None,
        lambda k: k.contention,
    ):
        for check in case.checks:
            if wanted(check):
                return check
    return None


def case_error(case: CaseResult) -> ErrorInfo | None:
    """The error to show: a flaky case's first failure, else the last attempt's error."""
    errors = [a.error for a in case.attempts if a.error is not None]
    if not errors:
        return None
    return errors[0] if case.status == "flaky" else errors[-1]


def problem_text(case: CaseResult) -> str:
    """One line that says what went wrong: the error's type and first line, a check's reason,
    or the case's reason."""
    error = case_error(case)
    if error is not None and (error.type != "CheckFailed" or not case.checks):
        return f"{error.type}: {first_line(error.message)}"
    check = failing_check(case)
    if check is not None and check.reason:
        return first_line(check.reason)
    if error is not None:
        return f"{error.type}: {first_line(error.message)}"
    return first_line(case.reason or "")


def _warn_rule(check: CheckResult) -> str:
    """`` (warn: <rule>)`` for a warn-policy check: which policy rule made it a warning."""
    if check.policy != "warn":
        return ""
    rule = check.settings.get("on_fail_rule")
    return f" (warn: {rule})" if rule else " (warn)"


def _attention_row(kind: str, case: CaseResult) -> str:
    check = failing_check(case)
    status = case.status + (" (simulated)" if case.simulated else "")
    if kind == "warn":
        status += ", warning"
    if case.contention:
        status += ", contention"
    if check is None:
        check_cells = ["-", "-", "-"]
    else:
        obtained = "not run" if check.passed is None else fmt_number(check.value)
        if check.contention:
            obtained += f" (wall {fmt_number(check.settings.get('wall_s'))})"
        required = f"{check.op} {fmt_number(check.threshold)}"
        check_cells = [
            md_code(check.name),
            md_text(obtained),
            md_text(required + _warn_rule(check)),
        ]
    problem = problem_text(case)
    return row(
        [
            _ICON.get(kind, "❌"),
            md_code(case.name),
            md_text(status),
            *check_cells,
            md_code(problem, limit=CELL_CHARS) if problem else "",
        ]
    )


def _whole_section(doc: Budget, lines: list[str]) -> None:
    """``lines`` after a blank line, whole or not at all (a cut fence or table would swallow
    the rest of the summary); a section left out is counted."""
    if doc.left_out or not doc.fits("\n".join(["", *lines])):
        doc.left_out += 1
        return
    doc.force("")
    for line in lines:
        doc.force(line)


def _hang_sections(doc: Budget, report: RunReport) -> None:
    """Each timed-out attempt's hang diagnosis."""
    from harness.report.hang_md import hang_attempts, hang_lines  # it imports this module

    for case, attempt in hang_attempts(report.cases):
        _whole_section(doc, list(hang_lines(case, attempt)))


def _ranks_sections(doc: Budget, report: RunReport) -> None:
    """Each multi-rank case's slowest rank per stage."""
    from harness.report.ranks_md import ranks_lines  # it imports this module

    for case in report.cases:
        lines = list(ranks_lines(case))
        if lines:
            _whole_section(doc, lines)


def _layers_sections(doc: Budget, report: RunReport) -> None:
    """Where each case compared with its layered reference first left it (a table of its
    layers for a case that did not pass)."""
    from harness.report.layers_md import layers_lines  # it imports this module

    for case in report.cases:
        lines = list(layers_lines(case, table=case.status != "passed"))
        if lines:
            _whole_section(doc, lines)


def summary_markdown(report: RunReport, *, max_bytes: int = DEFAULT_MAX_BYTES) -> str:
    """``summary.md`` of a run, at most ``max_bytes`` of UTF-8."""
    doc = Budget(max_bytes)
    for line in infrastructure_lines(report):
        doc.force(f"### 🛑 {line}")
    doc.force(f"### {verdict_line(report)}")
    doc.force("")
    doc.force(_context_line(report))
    if report.load_errors:
        doc.force("")
        doc.add("**Case files that did not load** (their cases did not run):")
        for e in report.load_errors:
            message = md_text(first_line(e.message), limit=CELL_CHARS * 2)
            doc.add(f"- {md_code(e.path, table=False)}: {message}")
    if report.infra_errors:
        doc.force("")
        doc.add("**Harness errors** (the run is incomplete):")
        for fault in report.infra_errors:
            doc.add(f"- {md_text(first_line(fault), limit=CELL_CHARS * 2)}")
    if report.missing:
        doc.force("")
        doc.add(
            f"**Missing** ({len(report.missing)} planned case(s) without a result, never a pass):"
        )
        for m in report.missing:
            reason = md_text(first_line(m.reason), limit=CELL_CHARS * 2)
            doc.add(f"- {md_code(m.name, table=False)}: {reason}")
    attention = attention_cases(report)
    if attention:
        doc.force("")
        doc.table(
            row(["", "case", "status", "check", "obtained", "required", "first error"]),
            (_attention_row(kind, c) for kind, c in attention),
        )
    _hang_sections(doc, report)
    _ranks_sections(doc, report)
    _layers_sections(doc, report)
    needing = {id(c) for _, c in attention}
    rest = [c for c in report.cases if id(c) not in needing]
    if rest:
        counts = ", ".join(f"{n} {s.replace('_', ' ')}" for s, n in _status_counts(rest))
        closing = "</details>"
        reserve = Budget.NOTE_RESERVE + len(closing) + 2
        if not doc.left_out and doc.fits("<details>", reserve + 200):
            doc.force("")
            doc.force(f"<details><summary>{counts}</summary>")
            doc.force("")
            doc.table(
                row(["case", "status", "attempts", "time"]),
                (
                    row(
                        [
                            md_code(c.name),
                            md_text(c.status + (" (simulated)" if c.simulated else "")),
                            str(len(c.attempts)),
                            f"{sum(a.duration_s for a in c.attempts):.2f}s",
                        ]
                    )
                    for c in rest
                ),
                reserve,
            )
            doc.force("")
            doc.force(closing)
        else:
            doc.left_out += len(rest)
    return doc.text(f"`report.json` and `junit.xml` of run {md_code(report.run_id, table=False)}")
