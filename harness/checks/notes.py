"""``note.<key>`` checks: values a target reported with ``probe.note``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from harness.model import CheckResult, CheckSpec, compare


def note_check(spec: CheckSpec, notes: Mapping[str, Any], chain: Sequence[str]) -> CheckResult:
    key = spec.metric.removeprefix("note.")
    threshold = spec.threshold_for(chain)
    if key not in notes:
        return CheckResult(
            spec.name,
            spec.metric,
            None,
            spec.op,
            threshold,
            spec.policy,
            passed=False,
            reason=f"the target recorded no note '{key}' (recorded: {sorted(notes) or 'none'})",
        )
    value = notes[key]
    return CheckResult(
        spec.name,
        spec.metric,
        value,
        spec.op,
        threshold,
        spec.policy,
        passed=compare(value, spec.op, threshold),
    )
