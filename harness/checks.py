"""Checks: turn what an attempt or a case recorded into pass/fail verdicts that explain themselves.

Three families:

* per attempt, in the worker: finiteness of every output (always on), ``note.<key>`` checks on
  values a target reported with ``probe.note``, and quality metrics against pinned references
  (``ssim``, ``psnr``, ... — see :mod:`harness.quality`);
* per case, in the manager: ``identical_outputs`` across attempts, and latency budgets
  (median seconds per stage over the measured attempts).
"""

from __future__ import annotations

import math
import operator
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.cases import Case, CheckSpec
from harness.model import Attempt, CheckResult, stage_samples

_OPS: dict[str, Callable[[Any, Any], bool]] = {
    ">=": operator.ge,
    ">": operator.gt,
    "<=": operator.le,
    "<": operator.lt,
    "==": operator.eq,
    "!=": operator.ne,
}
CASE_LEVEL_METRICS = frozenset({"identical_outputs"})


def compare(value: Any, op: str, threshold: Any) -> bool:
    """``value op threshold``; NaN never passes an ordering check."""
    if isinstance(value, float) and math.isnan(value) and op not in ("!=",):
        return False
    try:
        return bool(_OPS[op](value, threshold))
    except TypeError:
        return False


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
        from harness import quality

        if spec.metric not in quality.QUALITY_METRICS:
            known = sorted({*quality.QUALITY_METRICS, *CASE_LEVEL_METRICS, "note.<key>"})
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
            from harness.references import ReferenceStore

            store = ReferenceStore(Path(references_root))
        results.append(quality.evaluate(spec, case, platform_chain, outputs, arrays, store))
    return results


def identical_outputs_check(spec: CheckSpec, attempts: Iterable[Attempt]) -> CheckResult:
    """Every measured passing attempt produced byte-identical outputs (by content hash)."""
    measured = [a for a in attempts if not a.warmup and a.status == "passed"]
    hashes = [{k: v.get("hash") for k, v in a.outputs.items()} for a in measured]
    if len(measured) < 2:
        return CheckResult(
            spec.name,
            spec.metric,
            None,
            spec.op,
            spec.threshold,
            spec.policy,
            passed=False,
            reason=f"needs at least 2 passing measured attempts, got {len(measured)} "
            "(set repeats >= 2)",
        )
    same = all(h == hashes[0] for h in hashes[1:])
    details: list[dict[str, Any]] = []
    if not same:
        for name in sorted(set().union(*hashes)):
            vals = [h.get(name) for h in hashes]
            if len(set(vals)) > 1:
                details.append({"output": name, "hashes": ", ".join(str(v) for v in vals)})
    return CheckResult(
        spec.name,
        spec.metric,
        same,
        spec.op,
        spec.threshold,
        spec.policy,
        passed=compare(same, spec.op, spec.threshold),
        reason=None
        if same
        else "outputs differ between attempts: " + ", ".join(d["output"] for d in details),
        details=tuple(details),
    )


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
