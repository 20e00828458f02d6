"""Plain-text explanations of a case result: what failed, as a table, not a traceback."""

from __future__ import annotations

from collections.abc import Sequence

from harness.model import CaseResult, CheckResult


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A fixed-width text table."""
    cells = [[str(h) for h in headers]] + [[_fmt(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _fmt(v: object) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    if v is None:
        return "-"
    return str(v)


def explain_checks(checks: Sequence[CheckResult]) -> str:
    """The failed and not-run checks as one table, with per-frame rows where there are any."""
    rows: list[list[object]] = []
    for c in checks:
        if c.passed is True:
            continue
        verdict = "not run" if c.passed is None else ("FAIL" if c.policy == "fail" else "warn")
        settings = ", ".join(f"{k}={v}" for k, v in c.settings.items())
        rows.append(
            [
                verdict,
                c.name,
                c.output or "",
                "",
                c.value,
                f"{c.op} {_fmt(c.threshold)}",
                settings or c.reason or "",
            ]
        )
        for d in c.details:
            if d.get("passed") is True:
                continue
            where = d.get("frame", d.get("attempt", d.get("output", "")))
            rows.append(
                [
                    "",
                    "",
                    "",
                    where,
                    d.get("obtained", d.get("hashes")),
                    f"{c.op} {_fmt(d.get('threshold', c.threshold))}",
                    "",
                ]
            )
        if c.reason and settings:
            rows.append(["", "", "", "", "", "", c.reason])
    if not rows:
        return ""
    return table(["", "check", "output", "frame", "obtained", "threshold", "settings / why"], rows)


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
