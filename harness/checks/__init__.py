"""Floor 3: checks turn what an attempt or a case recorded into verdicts that explain themselves.

Families, one module each:

* per attempt, in the worker: :mod:`.finite` (every output, always on), :mod:`.notes`
  (``note.<key>`` on values a target reported with ``probe.note``), :mod:`.quality` (metrics
  against pinned references);
* per case, in the manager: :mod:`.identical` (``identical_outputs`` across attempts) and
  :mod:`.latency` (median seconds per stage against a budget).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.checks.finite import finiteness_checks
from harness.checks.identical import identical_outputs_check
from harness.checks.latency import budget_checks
from harness.checks.notes import note_check
from harness.model import Attempt, Case, CheckResult, CheckSpec
from harness.model.vocab import QUALITY_METRICS
from harness.platforms.policy import Policy

__all__ = [
    "CASE_LEVEL_METRICS",
    "budget_checks",
    "evaluate_attempt_checks",
    "evaluate_case_checks",
    "finiteness_checks",
    "identical_outputs_check",
    "note_check",
    "simulated_skip",
]

CASE_LEVEL_METRICS = frozenset({"identical_outputs"})


def _not_run(
    spec: CheckSpec, chain: Sequence[str], reason: str, settings: Mapping[str, Any] | None = None
) -> CheckResult:
    return CheckResult(
        spec.name,
        spec.metric,
        None,
        spec.op,
        spec.threshold_for(chain),
        spec.policy,
        passed=None,
        reason=reason,
        settings=dict(settings or {}),
    )


def simulated_skip(spec: CheckSpec, chain: Sequence[str], why: str) -> CheckResult:
    """A ``needs_device`` check on a simulated platform: not run, with the reason."""
    return _not_run(
        spec,
        chain,
        f"not run: {why}; this check asserts what ran on the device",
        {"not_run": "simulated", "needs_device": True},
    )


def evaluate_attempt_checks(
    case: Case,
    *,
    platform_chain: Sequence[str],
    outputs: Mapping[str, Mapping[str, Any]],
    arrays: Mapping[str, Any],
    notes: Mapping[str, Any],
    references_root: str | None,
    ran: bool,
    threshold_chain: Sequence[str] | None = None,
    simulated: str | None = None,
) -> list[CheckResult]:
    """The checks that need one attempt's outputs; run in the worker, next to the data.

    ``platform_chain`` is where references are looked up, ``threshold_chain`` where thresholds
    are (it may hold ``platform:arch`` entries; default: the platform chain). ``simulated`` is
    why the platform is simulated (None when it is real): checks with ``needs_device`` are then
    not run, and say so.
    """
    # Imported here: the quality checks need numpy, PyAV and the reference store (~0.45 s of
    # CPU to import), which the manager, importing this package for the case-level checks,
    # never uses, nor does a fresh-process worker whose case checks no output. A persistent
    # worker preloads them (harness.execution.pool.WORKER_MODULES).
    from harness.checks.quality import evaluate as evaluate_quality
    from harness.metrics.audio import shared_alignment
    from harness.references.store import ReferenceStore

    with shared_alignment():  # the audio checks of one output share its alignment
        chain = tuple(threshold_chain) if threshold_chain is not None else tuple(platform_chain)
        results = finiteness_checks(outputs)
        store = None
        decoded: dict[tuple[str, bool], Any] = {}  # each output file decoded once
        for spec in case.checks:
            if spec.metric in CASE_LEVEL_METRICS:
                continue
            if spec.needs_device and simulated:
                results.append(simulated_skip(spec, chain, simulated))
                continue
            if not ran:
                results.append(_not_run(spec, chain, "the attempt did not pass"))
                continue
            if spec.metric.startswith("note."):
                results.append(note_check(spec, notes, chain))
                continue
            if spec.metric not in QUALITY_METRICS:
                known = sorted({*QUALITY_METRICS, *CASE_LEVEL_METRICS, "note.<key>"})
                results.append(
                    CheckResult(
                        spec.name,
                        spec.metric,
                        None,
                        spec.op,
                        spec.threshold_for(chain),
                        spec.policy,
                        passed=False,
                        reason=f"unknown metric '{spec.metric}' in {case.source} "
                        f"(known: {', '.join(known)})",
                    )
                )
                continue
            if store is None and references_root:
                store = ReferenceStore(Path(references_root))
            results.append(
                evaluate_quality(
                    spec, case, platform_chain, outputs, arrays, store, chain, decoded=decoded
                )
            )
        return results


def evaluate_case_checks(
    case: Case,
    attempts: Sequence[Attempt],
    budget: Mapping[str, float],
    policy: Policy | None = None,
) -> list[CheckResult]:
    """Checks over all of a case's attempts, run by the manager once the case is done; the
    latency guard follows ``policy`` (:func:`budget_checks`)."""
    results = []
    for spec in case.checks:
        if spec.metric == "identical_outputs":
            results.append(identical_outputs_check(spec, attempts))
    results.extend(budget_checks(case.id, budget, attempts, policy))
    return results
