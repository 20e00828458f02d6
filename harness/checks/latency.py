"""Latency budgets: the median seconds of a stage over the measured attempts, against a limit.

What an overrun does is platform policy (:mod:`harness.platforms.policy`), not code: the limit
is the budget plus the larger of its relative and absolute tolerance, and ``latency.on_fail``
makes an overrun fail the case, warn (reported everywhere, the case passes) or skip the guard
(reported as not run). The check's settings name the rule that decided and its file.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from harness.model import Attempt, CheckResult, stage_samples
from harness.platforms.policy import Policy


def _policy_settings(policy: Policy | None, budget_s: float) -> dict[str, Any]:
    if policy is None:
        return {}
    on_fail = policy.decisions["latency.on_fail"]
    return {
        "budget_s": budget_s,
        "rel_tolerance": policy.value("latency.rel_tolerance"),
        "abs_floor_s": policy.value("latency.abs_floor_s"),
        "on_fail": on_fail.value,
        "on_fail_rule": on_fail.rule,
        "on_fail_source": on_fail.source,
    }


def budget_checks(
    case_id: str,
    budget: Mapping[str, float],
    attempts: Sequence[Attempt],
    policy: Policy | None = None,
) -> list[CheckResult]:
    """Median seconds per stage over measured passing attempts, against the budget (with the
    policy's tolerance; exactly the budget, failing, without a policy)."""
    samples = stage_samples(attempts)
    on_fail = policy.latency_on_fail if policy is not None else "fail"
    out = []
    for stage, budget_s in budget.items():
        limit = policy.latency_limit(budget_s) if policy is not None else budget_s
        settings = _policy_settings(policy, budget_s)
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
                    settings=settings,
                )
            )
            continue
        n = len(vals)
        median = statistics.median(vals)
        passed: bool | None = median <= limit
        reason = None
        if on_fail == "skip":
            passed = None
            rule = settings.get("on_fail_rule", "")
            reason = (
                f"not judged: latency.on_fail = skip ({rule}, {settings.get('on_fail_source')})"
            )
        elif not passed and policy is not None:
            over = "warns" if on_fail == "warn" else "fails"
            reason = (
                f"median {median:.4g} s over the limit {limit:.4g} s (budget {budget_s:g} s + "
                f"tolerance); latency.on_fail = {on_fail} ({settings['on_fail_rule']}) {over}"
            )
        out.append(
            CheckResult(
                f"budget({stage})",
                f"latency.{stage}",
                median,
                "<=",
                limit,
                "fail" if on_fail == "fail" else "warn",
                passed=passed,
                reason=reason,
                settings={"statistic": "median", "n": n, "unit": "s", **settings},
                details=tuple({"attempt": i, "obtained": v} for i, v in enumerate(vals)),
            )
        )
    return out
