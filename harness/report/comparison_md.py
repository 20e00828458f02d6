"""``summary.md`` of a comparison: a PR comment or CI job summary, from the Comparison record.

A one-line verdict first, then the cases that need attention, worst first (not comparable, new
failures, regressions with their ratio, interval and first divergence, flaky, suspect, ...),
then the cases with no change collapsed. Every string from the record is escaped
(:func:`~harness.report.markdown.md_text`, :func:`~harness.report.markdown.md_code`) and the
document stays under ``max_bytes``, as the run summary does.
"""

from __future__ import annotations

from harness.model import CaseComparison, Comparison, fmt_number
from harness.model.comparison import VERDICTS
from harness.model.coverage import triage_rank
from harness.report.markdown import (
    CELL_CHARS,
    DEFAULT_MAX_BYTES,
    Budget,
    duration_text,
    first_line,
    md_code,
    md_signature,
    md_text,
    row,
)

_ICON = {
    "regression": "🔴",
    "new_failure": "🔴",
    "not_comparable": "⛔",
    "infrastructure": "🛑",
    "suspect": "🟠",
    "flaky": "🟠",
    "inconclusive": "⚪",
    "missing": "⚪",
    "pre_existing_failure": "🟤",
    "fixed": "🟢",
    "improvement": "🟢",
    "skipped": "⏭️",
    "no_change": "✅",
}


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x - 1:+.1%}"


def _latency_line(c: CaseComparison) -> str:
    """The stages that moved (regression, suspect, improvement); else the verdict and count."""
    judged = [s for s in c.latency if s.judged]
    shown = [s for s in judged if s.verdict in ("regression", "suspect", "improvement")]
    if not shown:
        return f"{c.latency_verdict} ({len(judged)} stage(s))" if judged else c.latency_verdict
    return "; ".join(
        f"{s.stage} {s.verdict} {_pct(s.ratio)} [{_pct(s.ci_low)}, {_pct(s.ci_high)}]"
        for s in shown
    )


def _quality_line(c: CaseComparison) -> str:
    shown = [q for q in c.quality if q.verdict != "no_change"]
    if not shown:
        return c.quality_verdict
    return "; ".join(
        f"{q.metric}({q.output}) {q.verdict} {fmt_number(q.base_vs_ref)} → "
        f"{fmt_number(q.head_vs_ref)}"
        for q in shown
    )


def _divergence_extra(c: CaseComparison) -> str:
    """The details of the first divergence: ``(step 3, on head)``, or ``""``."""
    d = c.divergence
    extra = []
    if "step" in d.detail:
        extra.append(f"step {d.detail['step']}")
    if "side" in d.detail:
        extra.append(f"on {d.detail['side']}")
    if "max_abs_diff_at_least" in d.detail:
        extra.append(f"|Δ| ≥ {fmt_number(d.detail['max_abs_diff_at_least'])}")
    return f" ({', '.join(extra)})" if extra else ""


def _divergence(c: CaseComparison) -> str:
    d = c.divergence
    if d.kind in ("none", "missing"):
        return d.kind
    return f"{d.kind} at {d.first}{_divergence_extra(c)}"


def env_diff_lines(comparison: Comparison) -> list[str]:
    """The environment difference: Python, the machine (FFmpeg, driver, runner image, CPU
    flags, ...) and package versions, base -> head (a table)."""
    d = comparison.env_diff
    if d is None or (d.empty and d.reason is None):
        return []
    lines = ["", "#### Environment difference", ""]
    if d.reason is not None:
        lines.append(f"Packages not compared: {md_text(d.reason)}.")
    if d.empty:
        return lines
    lines += ["| package | base | head |", "|---|---|---|"]
    if d.python is not None:
        lines.append(row(["Python", md_text(d.python[0] or "-"), md_text(d.python[1] or "-")]))
    for name, (b, h) in d.system.items():  # FFmpeg, driver, runner image, CPU flags, ...
        lines.append(row([md_text(name), md_text(b or "-"), md_text(h or "-")]))
    rows = [
        *((name, b, h) for name, (b, h) in d.changed.items()),
        *((name, "-", v) for name, v in d.added.items()),
        *((name, v, "-") for name, v in d.removed.items()),
    ]
    lines += [row([md_code(n), md_text(b), md_text(h)]) for n, b, h in sorted(rows)]
    return lines


def infrastructure_lines(comparison: Comparison) -> list[str]:
    """One line per infrastructure signature that stopped cases on both sides, the summary's
    first: ``infrastructure: HTTP 403 on <url> (2 cases, both sides); not a code failure``."""
    cases: dict[str, int] = {}
    for c in comparison.cases:
        if c.verdict == "infrastructure":
            for sig in c.failures.head_signatures:
                cases[sig] = cases.get(sig, 0) + 1
    return [
        f"### 🛑 infrastructure: {md_signature(sig)} ({n} case{'s' * (n != 1)}, both "
        "sides); not a code failure"
        for sig, n in sorted(cases.items(), key=lambda kv: (-kv[1], kv[0]))
    ]


def drift_lines(comparison: Comparison) -> list[str]:
    """Each case's drift where the environments differ (worst verdict first): its input
    hashes, its first divergence and the environment differences on one line."""
    rank = {v: i for i, v in enumerate(VERDICTS)}
    drifted = sorted(
        (c for c in comparison.cases if c.drift is not None), key=lambda c: rank.get(c.verdict, -1)
    )
    if not drifted:
        return []
    lines = ["", "#### Environment drift", ""]
    for c in drifted:
        assert c.drift is not None
        lines.append(
            f"- {md_code(c.name, table=False)} ({md_text(c.verdict.replace('_', ' '))}): "
            f"{md_text(c.drift.line(), limit=CELL_CHARS * 4)}"
        )
    return lines


def verdict_line(comparison: Comparison) -> str:
    """``❌ 1 regression, 1 new failure, 10 no change: head `HEAD` vs base `main` ...``."""
    code = comparison.exit_code()
    counts = comparison.counts()
    if code == 0 and (counts.get("suspect") or counts.get("inconclusive") or counts.get("flaky")):
        icon = "⚠️"
    else:
        icon = {0: "✅", 1: "❌", 2: "🛑", 3: "🛑", 5: "⚪", 7: "⚠️"}.get(code, "❌")
    shown = ", ".join(f"{n} {v.replace('_', ' ')}" for v, n in counts.items() if n)
    base, head = comparison.base, comparison.head
    line = (
        f"{icon} {shown or 'no cases'}: head {md_code(head.rev or head.run_id, table=False)} "
        f"vs base {md_code(base.rev or base.run_id, table=False)}"
    )
    if comparison.runner:
        line += f" on runner {md_code(comparison.runner, table=False)}"
    line += f", {comparison.rounds} round(s)"
    took = duration_text(comparison.started_at, comparison.finished_at)
    if took:
        line += f" in {took}"
    if comparison.load_errors:
        line += f"; {len(comparison.load_errors)} case file(s) did not load"
    if comparison.infra_errors:
        line += "; harness errors, incomplete"
    return line


_ATTENTION_LAST = ("no_change",)


def _case_row(c: CaseComparison) -> str:
    f = c.failures
    return row(
        [
            _ICON.get(c.verdict, ""),
            md_code(c.name),
            md_text(c.verdict + (" (unstable)" if c.unstable else "")),
            md_text(_latency_line(c), limit=CELL_CHARS * 2),
            md_text(_quality_line(c), limit=CELL_CHARS * 2),
            md_text(
                f"{f.verdict}: {f.base_passed}/{f.base_passed + f.base_failed} / "
                f"{f.head_passed}/{f.head_passed + f.head_failed}"
            ),
            _divergence_md(c),
            md_text(triage_cell(c), limit=CELL_CHARS * 2),
        ]
    )


def triage_cell(c: CaseComparison) -> str:
    """The short form of a case's diff-aware triage: ``3 of 12 (tinyav/loader.py:88-90)``,
    ``none of 12``, or why it is not known."""
    t = c.triage
    if not t:
        return "-"
    status = t.get("status")
    if status == "executes":
        n, total = t.get("head_executed", 0), t.get("head_changed", 0)
        where = t.get("head_where") or t.get("base_where") or ""
        what = f"{n} of {total}" if n else f"base: {t.get('base_executed', 0)} removed"
        return f"{what} ({where})" if where else what
    if status == "none":
        return f"none of {t.get('head_changed', 0)}"
    return str(t.get("summary", status))


_HEADER = row(
    [
        "",
        "case",
        "verdict",
        "latency (ratio [interval])",
        "quality",
        "failures (base / head passed)",
        "first divergence",
        "head's changed lines executed",
    ]
)


def comparison_markdown(comparison: Comparison, *, max_bytes: int = DEFAULT_MAX_BYTES) -> str:
    """The summary: a verdict line, the cases that need attention worst first, the rest
    collapsed; at most ``max_bytes`` of UTF-8."""
    doc = Budget(max_bytes)
    for line in infrastructure_lines(comparison):
        doc.force(line)
    doc.force(f"### {verdict_line(comparison)}")
    doc.force("")
    base, head = comparison.base, comparison.head
    if base.env is not None and head.env is not None:
        # two environments, one revision: same_runner is about the machine
        rev = f"at {md_code(head.rev, table=False)}" if head.rev else "(working tree)"
        doc.force(
            f"environment {md_code(head.env, table=False)} vs "
            f"{md_code(base.env, table=False)} {rev}"
        )
        doc.force("")
        where = "same machine" if comparison.same_runner else "**DIFFERENT machines**"
    else:
        where = "same runner" if comparison.same_runner else "**different environments**"
    doc.force(f"comparison {md_code(comparison.id, table=False)} · A B B A interleaved · {where}")
    if comparison.env_differences:
        doc.add(
            "Environment differs in: "
            + ", ".join(md_code(d, table=False) for d in comparison.env_differences)
            + "."
        )
    if comparison.noise_source:
        doc.add(
            "Latency margins widened by calibrated noise from "
            f"{md_code(comparison.noise_source, table=False)}."
        )
    cal = comparison.calibration or {}
    if cal.get("status") in ("stale", "uncalibrated"):
        doc.add(
            f"Latency: {md_text(str(cal.get('status')))} runner: {md_text(str(cal.get('note')))}."
        )
    for e in comparison.infra_errors:
        doc.force("")
        doc.add(f"⚠️ harness error: {md_text(first_line(e), limit=CELL_CHARS * 2)}")
    for e in comparison.load_errors:
        doc.force("")
        doc.add(f"🛑 case file did not load: {md_text(first_line(e), limit=CELL_CHARS * 2)}")
    for line in [*env_diff_lines(comparison), *drift_lines(comparison)]:
        doc.add(line)
    rank = {v: i for i, v in enumerate(VERDICTS)}
    # worst verdict first; within a verdict, cases that execute head's change first
    ordered = sorted(
        comparison.cases, key=lambda c: (rank.get(c.verdict, -1), triage_rank(c.triage))
    )
    attention = [c for c in ordered if c.verdict not in _ATTENTION_LAST]
    rest = [c for c in ordered if c.verdict in _ATTENTION_LAST]
    if attention:
        doc.force("")
        doc.table(_HEADER, (_case_row(c) for c in attention))
    if rest:
        closing = "</details>"
        reserve = Budget.NOTE_RESERVE + len(closing) + 2
        if not doc.left_out and doc.fits("<details>", reserve + 200):
            doc.force("")
            doc.force(f"<details><summary>{len(rest)} no change</summary>")
            doc.force("")
            doc.table(_HEADER, (_case_row(c) for c in rest), reserve)
            doc.force("")
            doc.force(closing)
        else:
            doc.left_out += len(rest)
    notes = [c for c in attention if c.reason or c.triage]
    if notes and not doc.left_out and doc.fits("<details>", 800):
        doc.force("")
        doc.force("<details><summary>why</summary>")
        doc.force("")
        for c in notes:
            why = "; ".join(
                x for x in (c.reason, (c.triage or {}).get("summary") and
                            f"triage: {(c.triage or {}).get('summary')}") if x
            )  # fmt: skip
            doc.add(
                f"- {md_code(c.name, table=False)}: {md_text(why, limit=CELL_CHARS * 4)}",
                Budget.NOTE_RESERVE + 16,
            )
        doc.force("")
        doc.force("</details>")
    return doc.text(f"`comparison.json` of comparison {md_code(comparison.id, table=False)}")


def _divergence_md(c: CaseComparison) -> str:
    d = c.divergence
    if d.kind in ("none", "missing"):
        return d.kind
    extra = _divergence_extra(c).strip()
    return f"{md_text(d.kind)} at {md_code(d.first or '?')}" + (
        f" {md_text(extra)}" if extra else ""
    )


def explain_case_comparison(c: CaseComparison) -> str:
    """Plain text for one case's comparison (a pytest failure, a CI log): verdict, the three
    findings and where base and head first diverged."""
    lines = [f"{c.name}: {c.verdict}" + (f" - {c.reason}" if c.reason else "")]
    f = c.failures
    lines.append(
        f"failures: {f.verdict} (base {f.base_passed} passed / {f.base_failed} failed, "
        f"head {f.head_passed} passed / {f.head_failed} failed)"
    )
    lines.append(f"latency: {_latency_line(c)}")
    lines.append(f"quality: {_quality_line(c)}")
    lines.append(f"first divergence: {_divergence(c)}")
    if c.triage:
        lines.append(f"head's change: {c.triage.get('summary')}")
    return "\n".join(lines)
