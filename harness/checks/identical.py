"""``identical_outputs``: every measured passing attempt produced the same output content."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from harness.model import Attempt, CheckResult, CheckSpec, compare, passing_finals


def identical_outputs_check(spec: CheckSpec, attempts: Iterable[Attempt]) -> CheckResult:
    """Every measured passing attempt produced byte-identical outputs (by content hash)."""
    measured = passing_finals(attempts)
    hashes = [{k: v.get("hash") for k, v in a.outputs.items()} for a in measured]
    if len(measured) < 2:
        return CheckResult(
            spec.name,
            spec.metric,
            None,
            spec.op,
            spec.threshold,
            spec.policy,
            passed=False,
            reason=f"needs at least 2 passing measured attempts, got {len(measured)} "
            "(set repeats >= 2)",
        )
    same = all(h == hashes[0] for h in hashes[1:])
    details: list[dict[str, Any]] = []
    if not same:
        for name in sorted(set().union(*hashes)):
            vals = [h.get(name) for h in hashes]
            if len(set(vals)) > 1:
                details.append({"output": name, "hashes": ", ".join(str(v) for v in vals)})
    return CheckResult(
        spec.name,
        spec.metric,
        same,
        spec.op,
        spec.threshold,
        spec.policy,
        passed=compare(same, spec.op, spec.threshold),
        reason=None
        if same
        else "outputs differ between attempts: " + ", ".join(d["output"] for d in details),
        details=tuple(details),
    )
