"""The Markdown of a hang diagnosis (``Attempt.hang``), for ``summary.md``: per attempt that
timed out, a table of its server's processes (pid, rank, CPU %, log growing?, the last log
line and its age, the function it is in, how its stacks were taken) and, folded, each
process's stacks (the first :data:`STACK_LINES` lines; the whole ones are in report.json and
the HTML report) and the device tool's report.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from harness.model import Attempt, CaseResult
from harness.model.hang import HangDiagnosis, ProcessDiagnosis
from harness.report.markdown import md_code, md_text, row

STACK_LINES = 60
HEADER = ["pid", "rank", "CPU %", "log growing", "last log line", "stuck in", "stacks by"]


def _fenced(text: str) -> list[str]:
    """``text`` as a fenced block, the fence longer than any backtick run inside it."""
    fence = "`" * max(3, max((len(r) for r in re.findall(r"`+", text)), default=0) + 1)
    return [f"{fence}text", text.rstrip("\n"), fence]


def _growing(p: ProcessDiagnosis) -> str:
    if p.log_growing is None:
        return "no log"
    return f"yes (+{p.log_grew_bytes} B)" if p.log_growing else "no"


def _last(p: ProcessDiagnosis) -> str:
    if not p.last_line:
        return "-"
    age = f" ({p.last_line_age_s:.1f} s ago)" if p.last_line_age_s is not None else ""
    return md_code(p.last_line, limit=120) + (" " + md_text(age) if age else "")


def process_row(p: ProcessDiagnosis) -> str:
    return row(
        [
            str(p.pid),
            str(p.rank) if p.rank is not None else "?",
            f"{p.cpu_percent:g}" if p.cpu_percent is not None else "?",
            _growing(p),
            _last(p),
            md_code(p.where) if p.where else "-",
            md_text(p.stack_method),
        ]
    )


def _stacks(d: HangDiagnosis) -> Iterator[str]:
    yield f"<details><summary>stacks of {len(d.processes)} process(es), device</summary>"
    yield ""
    for p in d.processes:
        rank = f"rank {p.rank}" if p.rank is not None else "rank ?"
        notes = f"; {p.stack_notes}" if p.stack_notes else ""
        yield f"pid {p.pid} ({rank}), {md_text(p.stack_method + notes)}:"
        lines = p.stack.splitlines()
        shown = "\n".join(lines[:STACK_LINES])
        if len(lines) > STACK_LINES:
            shown += f"\n... ({len(lines) - STACK_LINES} more lines in report.json)"
        yield from _fenced(shown or "(no stack)")
    tool = f" ({d.device_tool})" if d.device_tool else ""
    yield f"device{md_text(tool)}:"
    yield from _fenced(d.device)
    yield "</details>"


def hang_lines(case: CaseResult, a: Attempt) -> Iterator[str]:
    """The Markdown lines of attempt ``a``'s hang diagnosis (none when it has none)."""
    d = a.hang
    if d is None:
        return
    retry = a.retried_because or a.not_retried
    head = (
        f"**Hang diagnosis** of {md_code(case.name, table=False)} attempt #{a.index}: "
        + md_text(
            f"{d.trigger}, captured in {d.seconds:.1f} s (deadline {d.deadline_s:g} s) "
            f"before the kill" + (f"; {retry}" if retry else "")
        )
    )
    if d.unfinished:
        head += md_text(f"; {d.unfinished}")
    yield head
    yield ""
    yield row(HEADER)
    yield "|" + "---|" * len(HEADER)
    yield from (process_row(p) for p in d.processes)
    yield ""
    yield from _stacks(d)


def hang_attempts(cases: tuple[CaseResult, ...]) -> list[tuple[CaseResult, Attempt]]:
    """Every attempt with a hang diagnosis, with its case, in report order."""
    return [(c, a) for c in cases for a in c.attempts if a.hang is not None]
