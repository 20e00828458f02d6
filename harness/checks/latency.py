"""Latency budgets: the median seconds of a stage over the measured attempts, against a limit."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

from harness.model import Attempt, CheckResult, stage_samples


def budget_checks(
    case_id: str, budget: Mapping[str, float], attempts: Sequence[Attempt]
) -> list[CheckResult]:
    """Median seconds per stage over measured passing attempts, against the budget."""
    samples = stage_samples(attempts)
    out = []
    for stage, limit in budget.items():
        vals = sorted(samples.get(stage, []))
        if not vals:
            out.append(
                CheckResult(
                    f"budget({stage})",
                    f"latency.{stage}",
                    None,
                    "<=",
                    limit,
                    "fail",
                    passed=False,
                    reason=f"stage '{stage}' was not recorded by any passing "
                    f"measured attempt of '{case_id}'",
                )
            )
            continue
        n = len(vals)
        median = statistics.median(vals)
        out.append(
            CheckResult(
                f"budget({stage})",
                f"latency.{stage}",
                median,
                "<=",
                limit,
                "fail",
                passed=median <= limit,
                settings={"statistic": "median", "n": n, "unit": "s"},
                details=tuple({"attempt": i, "obtained": v} for i, v in enumerate(vals)),
            )
        )
    return out
