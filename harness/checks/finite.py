"""Finiteness: every output is checked for NaN/Inf, always; any non-finite value fails."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.model import CheckResult


def finiteness_checks(outputs: Mapping[str, Mapping[str, Any]]) -> list[CheckResult]:
    """One check per output: any NaN or Inf fails the case and names the output."""
    out = []
    for name, info in outputs.items():
        nonfinite = int(info.get("nonfinite", 0) or 0)
        out.append(
            CheckResult(
                name=f"finite({name})",
                metric="nonfinite",
                value=nonfinite,
                op="==",
                threshold=0,
                policy="fail",
                passed=nonfinite == 0,
                output=name,
                reason=None
                if nonfinite == 0
                else f"output '{name}' contains {nonfinite} NaN/Inf values",
            )
        )
    return out
