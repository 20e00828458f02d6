"""``summary.md`` of a comparison: a PR comment or CI job summary, from the Comparison record."""

from __future__ import annotations

from harness.model import CaseComparison, Comparison, fmt_number

_ICON = {
    "regression": "🔴",
    "new_failure": "🔴",
    "not_comparable": "⛔",
    "suspect": "🟠",
    "flaky": "🟠",
    "inconclusive": "⚪",
    "missing": "⚪",
    "pre_existing_failure": "🟤",
    "fixed": "🟢",
    "improvement": "🟢",
    "no_change": "✅",
}


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


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


def _divergence(c: CaseComparison) -> str:
    d = c.divergence
    if d.kind in ("none", "missing"):
        return d.kind
    extra = []
    if "step" in d.detail:
        extra.append(f"step {d.detail['step']}")
    if "side" in d.detail:
        extra.append(f"on {d.detail['side']}")
    if "max_abs_diff_at_least" in d.detail:
        extra.append(f"|Δ| ≥ {fmt_number(d.detail['max_abs_diff_at_least'])}")
    return f"{d.kind} at `{d.first}`" + (f" ({', '.join(extra)})" if extra else "")


def comparison_markdown(comparison: Comparison) -> str:
    """The summary: a verdict count line, then one table row per case."""
    base, head = comparison.base, comparison.head
    counts = ", ".join(f"{v} {k}" for k, v in comparison.counts().items() if v)
    lines = [
        f"## harness compare: {head.rev or head.run_id} vs {base.rev or base.run_id}",
        "",
        f"Runner `{comparison.runner}`, {comparison.rounds} round(s) (A B B A), "
        f"{'same runner' if comparison.same_runner else 'DIFFERENT environments'}: {counts}.",
    ]
    if comparison.env_differences:
        lines.append(f"Environment differs in: {', '.join(comparison.env_differences)}.")
    if comparison.noise_source:
        lines.append(
            f"Latency margins widened by calibrated noise from `{comparison.noise_source}`."
        )
    lines += [
        "",
        "| | case | verdict | latency | quality | failures (base / head passed) "
        "| first divergence |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in comparison.cases:
        f = c.failures
        lines.append(
            "| "
            + " | ".join(
                _cell(x)
                for x in (
                    _ICON.get(c.verdict, ""),
                    f"`{c.name}`",
                    c.verdict + (" (unstable)" if c.unstable else ""),
                    _latency_line(c),
                    _quality_line(c),
                    f"{f.verdict}: {f.base_passed}/{f.base_passed + f.base_failed} / "
                    f"{f.head_passed}/{f.head_passed + f.head_failed}",
                    _divergence(c),
                )
            )
            + " |"
        )
    notes = [c for c in comparison.cases if c.reason and c.verdict != "no_change"]
    if notes:
        lines += ["", "<details><summary>why</summary>", ""]
        lines += [f"- `{c.name}`: {_cell(c.reason)}" for c in notes]
        lines += ["", "</details>"]
    for e in comparison.infra_errors:
        lines.append(f"\n⚠️ harness error: {_cell(e)}")
    return "\n".join(lines) + "\n"


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
    lines.append(f"first divergence: {_divergence(c).replace('`', '')}")
    return "\n".join(lines)
