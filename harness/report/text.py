"""Plain-text explanations of a case result: what failed, as a table, not a traceback."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from harness.model import CaseResult, CheckResult, compare, fmt_number


def contention_figures(check: CheckResult) -> str:
    """``wall 0.874 s, run-queue delay 0.21 s, wall less delay 0.664 s, limit 0.847 s (budget
    0.77 s)``: the figures of a budget met only under contention (medians)."""
    st = check.settings

    def s(v: Any) -> str:
        return f"{v:.4g} s" if isinstance(v, int | float) else f"{fmt_number(v)} s"

    return (
        f"wall {s(st.get('wall_s'))}, run-queue delay {s(st.get('wait_s'))}, wall less delay "
        f"{s(check.value)}, limit {s(check.threshold)} (budget {s(st.get('budget_s'))})"
    )


def explain_check(check: CheckResult) -> str:
    """A plain-text explanation of a check: verdict line, reason, settings, per-frame table.

    Used by the pytest items and the JUnit failure text.
    """
    verdict = {True: "passed", False: "FAILED", None: "NOT RUN"}[check.passed]
    if check.contention:
        verdict = "CONTENTION (passed on wall time less run-queue delay)"
    head = f"{check.name}: {verdict}"
    if check.value is not None:
        n = len(check.details)
        how = "mean" if check.settings.get("reduce") == "mean" else "worst"
        head += f", obtained {fmt_number(check.value)}" + (
            f" ({how} of {n} frames)" if n > 1 and any("frame" in r for r in check.details) else ""
        )
    head += f", required {check.op} {fmt_number(check.threshold)}"
    if check.policy == "warn":
        rule = check.settings.get("on_fail_rule")
        head += f" [policy: warn, {rule}]" if rule else " [policy: warn]"
    lines = [head]
    if check.reason:
        lines.append(f"reason: {check.reason}")
    settings = {
        k: v
        for k, v in check.settings.items()
        if k not in ("reference", "reference_blessed", "frames") and v not in ("", None)
    }
    if "reference" in check.settings:
        lines.append(f"reference: {check.settings['reference']}")
    if settings:
        lines.append(
            "settings: " + ", ".join(f"{k}={fmt_number(v)}" for k, v in sorted(settings.items()))
        )
    if check.details:
        header = ["metric", "frame", "obtained", "op", "threshold", "passed"]
        rows = [
            [
                check.metric,
                fmt_number(row.get("frame")),
                fmt_number(row.get("obtained")),
                check.op,
                fmt_number(row.get("threshold", check.threshold)),
                "yes" if _row_passed(check, row) else "NO",
            ]
            for row in check.details
        ]
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
        for r in [header, *rows]:
            cells = [
                r[0].ljust(widths[0]),
                *(c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True)),
            ]
            lines.append("  " + "  ".join(cells))
    return "\n".join(lines)


def _row_passed(check: CheckResult, row: Mapping[str, Any]) -> bool:
    if "passed" in row:
        return bool(row["passed"])
    return compare(row.get("obtained"), check.op, row.get("threshold", check.threshold))


def explain_checks(checks: Sequence[CheckResult]) -> str:
    """Every check that did not pass (failed, warned or not run) or passed only under
    contention, one block each."""
    return "\n\n".join(explain_check(c) for c in checks if c.passed is not True or c.contention)


def explain_case(result: CaseResult) -> str:
    """Why a case did not pass: status, reason, the check table, the last error's stack."""
    lines = [
        f"{result.name}: {result.status}" + (f" - {result.reason}" if result.reason else ""),
        f"source: {result.source}  seed: {result.seed}  attempts: {len(result.attempts)}",
    ]
    for a in result.attempts:
        err = (
            f"  {a.error.type}: {a.error.message.splitlines()[0]}"
            if a.error and a.error.message
            else ""
        )
        lines.append(
            f"  attempt {a.index} (repeat {a.repeat}, retry {a.retry}"
            f"{', warmup' if a.warmup else ''}): {a.status} in {a.duration_s:.3f} s"
            f"{err}"
        )
    checks = explain_checks(result.checks)
    if checks:
        lines += ["", checks]
    last_err = next((a.error for a in reversed(result.attempts) if a.error is not None), None)
    if last_err is not None and last_err.traceback and last_err.type != "CheckFailed":
        tb = last_err.traceback.strip().splitlines()
        lines += ["", "last error:", *tb[-25:]]
    return "\n".join(lines)
