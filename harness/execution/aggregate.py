"""Attempts -> one case result. Pure: the same attempts give the same result, whatever ran
before, so a linear run and an interleaved comparison aggregate alike."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from harness.cases import PlanItem
from harness.checks import evaluate_case_checks
from harness.model import (
    FAILING,
    SEVERITY,
    Attempt,
    CaseResult,
    CheckResult,
    Side,
    Status,
    runs,
    warmup_runs,
)
from harness.platforms.policy import Policy


def final_attempts(attempts: Sequence[Attempt]) -> list[Attempt]:
    """The final attempt of each warm-up and measured run (:mod:`harness.model.counting`)."""
    return [r.final for r in (*warmup_runs(attempts), *runs(attempts))]


def worst(attempts: Sequence[Attempt]) -> Status:
    statuses = {a.status for a in attempts}
    for s in SEVERITY:
        if s in statuses:
            return s
    return "error"


def first_line(text: str) -> str:
    lines = text.splitlines()
    return lines[0] if lines else ""


def _reason(status: Status, attempts: Sequence[Attempt]) -> str | None:
    if status == "flaky":
        failed = [a for a in attempts if a.status in FAILING]
        first = failed[0].error if failed and failed[0].error else None
        return f"passed only after {len(failed)} failed attempt(s)" + (
            f"; first: {first.type}: {first_line(first.message)}" if first else ""
        )
    if status in ("passed",):
        return None
    err = next((a.error for a in reversed(attempts) if a.error is not None), None)
    stopped = next((a.not_retried for a in reversed(attempts) if a.not_retried), "")
    text = f"{err.type}: {first_line(err.message)}" if err else None
    # An infrastructure failure the retries were not spent on says so, with its signature.
    return f"{text}; {stopped}" if text and stopped else text


# Device platforms and the torch device type their tensors live on (ROCm's torch calls HIP "cuda").
DEVICE_TYPES = {"cuda": "cuda", "hip": "cuda", "npu": "npu", "xpu": "xpu", "mps": "mps"}


def recorded_devices(attempts: Sequence[Attempt]) -> list[str]:
    """Every device (``cpu``, ``cuda:0``...) a torch tensor the attempts fingerprinted or output
    lived on. numpy arrays are recorded as ``cpu`` but say nothing about where work ran: a
    target computes on its device and hands numpy to the probe at the end."""
    seen: set[str] = set()
    for a in attempts:
        for rec in (*a.fingerprints.values(), *a.outputs.values()):
            device = rec.get("device")
            if isinstance(device, str) and rec.get("framework") != "numpy":
                seen.add(device)
    return sorted(seen)


def simulated_reason(
    platform: str, unavailable: str | None, attempts: Sequence[Attempt]
) -> str | None:
    """Why a result for ``platform`` is simulated, or None when it is real.

    Simulated when the platform is not available here (``unavailable`` says why), and also when
    it is but the attempts recorded torch tensors and none lived on the platform's device type:
    the work then ran somewhere else (on the CPU, say) with the platform's code paths
    selected. Either way the reason says where the recorded tensors lived. A case that
    recorded no torch tensor keeps the availability rule.
    """
    devices = recorded_devices(attempts)
    types = sorted({d.split(":")[0] for d in devices})
    where = (
        f"results computed on {', '.join(types)} (devices recorded: {', '.join(devices)})"
        if devices
        else None
    )
    if unavailable is not None:
        return f"{unavailable}; " + (
            where or "the target recorded no torch tensor, so where it computed is not known"
        )
    want = DEVICE_TYPES.get(platform)
    if want is None or where is None or want in types:
        return None
    return f"simulated: {platform} {where}"


def aggregate(
    item: PlanItem,
    attempts: Sequence[Attempt],
    *,
    planned_runs: int,
    budget: Mapping[str, float],
    interrupted: bool = False,
    simulated: str | None = None,
    repeats: int | None = None,
    side: Side = "head",
    identity: Mapping[str, Any] | None = None,
    policy: Policy | None = None,
    policy_record: Mapping[str, Mapping[str, Any]] | None = None,
) -> CaseResult:
    """The verdict on one case for one side from all of its attempts.

    ``planned_runs`` is how many warm-up + measured runs the schedule meant to make;
    ``simulated`` is why the platform is not available here (None when it is); whether the
    result is labelled simulated also follows where the attempts' tensors lived
    (:func:`simulated_reason`). ``policy`` decides what a latency overrun does; it and the
    platform ``identity`` are recorded with the result (``policy_record``: setting -> its
    value, rule and source).
    """
    attempts = tuple(attempts)
    case = item.case
    finals = final_attempts(attempts)
    if finals and all(a.status == "skipped" for a in finals):
        # The worker declined to run it (a module of `requires` is missing there): say why.
        why = next((a.error.message for a in finals if a.error is not None), "skipped")
        return skipped(item, why, attempts, side=side)
    all_passed = bool(finals) and all(a.status == "passed" for a in finals)
    if any(a.status == "budget_declined" for a in attempts):
        status: Status = worst(finals)
    elif all_passed and len(finals) == planned_runs:
        status = "flaky" if any(a.status in FAILING for a in attempts) else "passed"
    elif interrupted and (all_passed or not finals):
        return skipped(
            item,
            "not finished: run interrupted" if attempts else "not run: run interrupted",
            attempts,
            side=side,
        )
    else:
        status = worst(finals)
    case_checks: list[CheckResult] = evaluate_case_checks(case, attempts, budget, policy)
    last_checks = next(
        (a.checks for a in reversed(attempts) if not a.warmup and a.status != "budget_declined"),
        (),
    )
    if status in ("passed", "flaky") and any(c.blocking for c in case_checks):
        status = "failed"
    reason = _reason(status, attempts)
    if status == "failed" and reason is None:
        blocking = [c for c in case_checks if c.blocking]
        reason = "; ".join(f"{c.name}: {c.reason or c.value}" for c in blocking) or None
    why_simulated = simulated_reason(item.platform, simulated, attempts) if attempts else None
    if why_simulated:
        reason = why_simulated if reason is None else f"{reason}; {why_simulated}"
    return CaseResult(
        id=case.id,
        kind=case.kind,
        platform=item.platform,
        status=status,
        simulated=why_simulated is not None,
        source=case.source,
        reason=reason,
        checks=(*last_checks, *case_checks),
        attempts=attempts,
        seed=case.seed,
        repeats=repeats or case.repeats,
        reference=case.reference or case.id,
        side=side,
        identity=identity,
        policy=dict(policy_record or {}),
    )


def skipped(
    item: PlanItem, reason: str, attempts: Sequence[Attempt] = (), *, side: Side = "head"
) -> CaseResult:
    """A case that did not run (or did not finish), with why."""
    case = item.case
    return CaseResult(
        id=case.id,
        kind=case.kind,
        platform=item.platform,
        status="skipped",
        source=case.source,
        reason=reason,
        attempts=tuple(attempts),
        seed=case.seed,
        repeats=case.repeats,
        reference=case.reference or case.id,
        side=side,
    )
