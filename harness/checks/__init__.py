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
from harness.checks.quality import QUALITY_METRICS
from harness.checks.quality import evaluate as evaluate_quality
from harness.model import Attempt, Case, CheckResult, CheckSpec
from harness.references.store import ReferenceStore

__all__ = [
    "CASE_LEVEL_METRICS",
    "budget_checks",
    "evaluate_attempt_checks",
    "evaluate_case_checks",
    "finiteness_checks",
    "identical_outputs_check",
    "note_check",
]

CASE_LEVEL_METRICS = frozenset({"identical_outputs"})


def _not_run(spec: CheckSpec, chain: Sequence[str], reason: str) -> CheckResult:
    return CheckResult(
        spec.name,
        spec.metric,
        None,
        spec.op,
        spec.threshold_for(chain),
        spec.policy,
        passed=None,
        reason=reason,
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
) -> list[CheckResult]:
    """The checks that need one attempt's outputs; run in the worker, next to the data."""
    results = finiteness_checks(outputs)
    store = None
    for spec in case.checks:
        if spec.metric in CASE_LEVEL_METRICS:
            continue
        if not ran:
            results.append(_not_run(spec, platform_chain, "the attempt did not pass"))
            continue
        if spec.metric.startswith("note."):
            results.append(note_check(spec, notes, platform_chain))
            continue
        if spec.metric not in QUALITY_METRICS:
            known = sorted({*QUALITY_METRICS, *CASE_LEVEL_METRICS, "note.<key>"})
            results.append(
                CheckResult(
                    spec.name,
                    spec.metric,
                    None,
                    spec.op,
                    spec.threshold_for(platform_chain),
                    spec.policy,
                    passed=False,
                    reason=f"unknown metric '{spec.metric}' in {case.source} "
                    f"(known: {', '.join(known)})",
                )
            )
            continue
        if store is None and references_root:
            store = ReferenceStore(Path(references_root))
        results.append(evaluate_quality(spec, case, platform_chain, outputs, arrays, store))
    return results


def evaluate_case_checks(
    case: Case, attempts: Sequence[Attempt], budget: Mapping[str, float]
) -> list[CheckResult]:
    """Checks over all of a case's attempts, run by the manager once the case is done."""
    results = []
    for spec in case.checks:
        if spec.metric == "identical_outputs":
            results.append(identical_outputs_check(spec, attempts))
    results.extend(budget_checks(case.id, budget, attempts))
    return results
