"""Latency budgets: the median seconds of a stage over the measured attempts, against a limit.

What an overrun does is platform policy (:mod:`harness.platforms.policy`), not code: the limit
is the budget plus the larger of its relative and absolute tolerance, and ``latency.on_fail``
makes an overrun fail the case, warn (reported everywhere, the case passes) or skip the guard
(reported as not run). The check's settings name the rule that decided and its file.

What is judged is the code's own time: each final passing attempt's wall seconds less the
run-queue delay recorded for the stage (seconds its threads were runnable but not running,
``harness.model.judged_seconds``), so other processes' load on a shared runner neither fails
nor passes a case. A budget that wall time overran and that time met is labelled
``contention`` (``CheckResult.contention``) with its figures, the median wall seconds, the
median delay taken out and the budget: shown in every report, never failed, never a silent
pass. A sleep, a lock or I/O the code adds still counts (its threads are not runnable then).
A stage that recorded device-event time ran on a device, where host threads waiting for a CPU
do not lengthen the device's work: it is judged on wall time, as before.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from harness.model import Attempt, CheckResult, judged_seconds, passing_finals
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


CONTENTION_FREE = "wall less run-queue delay"
WALL = "wall"


def _samples(stage: str, attempts: Sequence[Attempt]) -> tuple[list[tuple[float, float]], str]:
    """(judged seconds, wall seconds) of ``stage`` for each final passing measured attempt that
    recorded it, and what the judged seconds are."""
    finals = passing_finals(attempts)
    device = any(stage in a.stage_device for a in finals)
    out = []
    for a in finals:
        if stage != "total" and stage not in a.stages:
            continue
        wall = judged_seconds(a, contention_free=False).get(stage, 0.0)
        own = wall if device else judged_seconds(a, contention_free=True).get(stage, 0.0)
        out.append((own, wall))
    return out, WALL if device else CONTENTION_FREE


def _limit_text(limit: float, budget: float) -> str:
    if limit == budget:
        return f"the budget {budget:.4g} s"
    return f"the limit {limit:.4g} s (budget {budget:g} s + tolerance)"


def _contention_reason(value: float, wall: float, wait: float, limit: float, budget: float) -> str:
    return (
        f"contention: median wall {wall:.4g} s is over {_limit_text(limit, budget)}, but "
        f"{wait:.4g} s of it (median) was run-queue delay, "
        f"time the stage's threads were runnable while other processes held the CPUs; wall "
        f"less that delay, {value:.4g} s, is within the limit: not failed, not the code's time"
    )


def budget_checks(
    case_id: str,
    budget: Mapping[str, float],
    attempts: Sequence[Attempt],
    policy: Policy | None = None,
) -> list[CheckResult]:
    """Median seconds per stage over the final passing measured attempts, against the budget
    (with the policy's tolerance; exactly the budget, failing, without a policy); seconds as
    the module docstring says: wall less run-queue delay, wall time on a device."""
    on_fail = policy.latency_on_fail if policy is not None else "fail"
    out = []
    for stage, budget_s in budget.items():
        limit = policy.latency_limit(budget_s) if policy is not None else budget_s
        settings = _policy_settings(policy, budget_s)
        rows, measure = _samples(stage, attempts)
        if not rows:
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
        n = len(rows)
        median = statistics.median(own for own, _ in rows)
        wall = statistics.median(w for _, w in rows)
        wait = statistics.median(w - own for own, w in rows)
        passed: bool | None = median <= limit
        reason = None
        figures: dict[str, Any] = {
            "measure": measure,
            "wall_s": wall,
            "wait_s": wait,
            "budget_s": budget_s,
        }
        if on_fail == "skip":
            passed = None
            rule = settings.get("on_fail_rule", "")
            reason = (
                f"not judged: latency.on_fail = skip ({rule}, {settings.get('on_fail_source')})"
            )
        elif passed and wall > limit:
            figures["contention"] = True
            reason = _contention_reason(median, wall, wait, limit, budget_s)
        elif not passed:
            seconds = f"median {median:.4g} s"
            if measure == CONTENTION_FREE:
                seconds += f" (wall {wall:.4g} s less {wait:.4g} s of run-queue delay)"
            reason = f"{seconds} over {_limit_text(limit, budget_s)}"
            if policy is not None:
                over = "warns" if on_fail == "warn" else "fails"
                reason = (
                    f"{seconds} over the limit {limit:.4g} s (budget {budget_s:g} s + "
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
                settings={"statistic": "median", "n": n, "unit": "s", **figures, **settings},
                details=tuple(
                    {"attempt": i, "obtained": own, "wall": w, "wait": w - own}
                    for i, (own, w) in enumerate(sorted(rows))
                ),
            )
        )
    return out
