"""Finiteness: every output is checked for NaN/Inf, always; any non-finite value fails.

The probe decodes every output (arrays, media, safetensors, ``.npy``/``.npz``) and records how
many NaN/Inf values it holds. An output it could not decode records ``nonfinite: None`` and
why; its check is then *not run* (``passed=None``) with that reason, never passed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.model import CheckResult


def _finite_check(name: str, info: Mapping[str, Any]) -> CheckResult:
    nonfinite = info.get("nonfinite")
    passed: bool | None
    reason: str | None
    if nonfinite is None:
        why = info.get("nonfinite_reason") or "the probe recorded no NaN/Inf count for it"
        passed, reason = None, f"not run: output '{name}' was not checked for NaN/Inf: {why}"
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
        policy="fail",
        passed=passed,
        output=name,
        reason=reason,
    )


def finiteness_checks(outputs: Mapping[str, Mapping[str, Any]]) -> list[CheckResult]:
    """One check per output: any NaN or Inf fails the case and names the output."""
    return [_finite_check(name, info) for name, info in outputs.items()]
