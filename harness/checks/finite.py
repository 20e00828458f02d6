"""Finiteness: every output is checked for NaN/Inf, always; any non-finite value fails.

The probe decodes every output (arrays, media, safetensors, ``.npy``/``.npz``) and records how
many NaN/Inf values it holds. An output it could not decode records ``nonfinite: None`` and
why. A file of a format the harness decodes that does not decode is broken, and fails. A file
of a format it has no decoder for (a log, a config) holds no numbers it could judge: its check
is *not run* (``passed=None``) with that reason, never passed, with policy ``warn``, so it is
reported on the case and in every rendering without making the case an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.model import CheckResult, Policy


def _finite_check(name: str, info: Mapping[str, Any]) -> CheckResult:
    nonfinite = info.get("nonfinite")
    passed: bool | None
    reason: str | None
    policy: Policy = "fail"
    if nonfinite is None and info.get("corrupt"):
        why = info.get("nonfinite_reason") or "it could not be decoded"
        passed, reason = False, f"output '{name}' is broken: {why}"
    elif nonfinite is None:
        why = info.get("nonfinite_reason") or "the probe recorded no NaN/Inf count for it"
        passed, reason = None, f"not run: output '{name}' was not checked for NaN/Inf: {why}"
        policy = "warn"
    else:
        nonfinite = int(nonfinite)
        passed = nonfinite == 0
        reason = None if passed else f"output '{name}' contains {nonfinite} NaN/Inf values"
    return CheckResult(
        name=f"finite({name})",
        metric="nonfinite",
        value=nonfinite,
        op="==",
        threshold=0,
        policy=policy,
        passed=passed,
        output=name,
        reason=reason,
    )


def finiteness_checks(outputs: Mapping[str, Mapping[str, Any]]) -> list[CheckResult]:
    """One check per output: any NaN or Inf fails the case and names the output."""
    return [_finite_check(name, info) for name, info in outputs.items()]
