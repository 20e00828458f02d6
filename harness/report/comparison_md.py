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


def env_diff_lines(comparison: Comparison) -> list[str]:
    """The environment difference: Python and package versions, base -> head (a table)."""
    d = comparison.env_diff
    if d is None or (d.empty and d.reason is None):
        return []
    lines = ["", "### Environment difference", ""]
    if d.reason is not None:
        lines.append(f"Packages not compared: {_cell(d.reason)}.")
    if d.empty:
        return lines
    lines += ["| package | base | head |", "|---|---|---|"]
    if d.python is not None:
        lines.append(f"| Python | {d.python[0] or '-'} | {d.python[1] or '-'} |")
    rows = [
        *((name, b, h) for name, (b, h) in d.changed.items()),
        *((name, "-", v) for name, v in d.added.items()),
        *((name, v, "-") for name, v in d.removed.items()),
    ]
    lines += [f"| `{_cell(n)}` | {_cell(b)} | {_cell(h)} |" for n, b, h in sorted(rows)]
    return lines


def _title(comparison: Comparison) -> str:
    base, head = comparison.base, comparison.head
    if base.env is not None and head.env is not None:
        rev = f" at `{head.rev}`" if head.rev else " (working tree)"
        return f"## harness compare: environment `{head.env}` vs `{base.env}`{rev}"
    return f"## harness compare: {head.rev or head.run_id} vs {base.rev or base.run_id}"


def comparison_markdown(comparison: Comparison) -> str:
    """The summary: a verdict count line, then one table row per case."""
    counts = ", ".join(f"{v} {k}" for k, v in comparison.counts().items() if v)
    if comparison.base.env is not None:  # two environments: same_runner is the machine
        where = "same machine" if comparison.same_runner else "DIFFERENT machines"
    else:
        where = "same runner" if comparison.same_runner else "DIFFERENT environments"
    lines = [
        _title(comparison),
        "",
        f"Runner `{comparison.runner}`, {comparison.rounds} round(s) (A B B A), {where}: {counts}.",
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
    lines += env_diff_lines(comparison)
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
