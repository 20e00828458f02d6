"""The failure matrix of one case: pass/fail counts per side and what the failures were.

Counts are over measured runs (the final attempt of each run, as :mod:`harness.model.counting`
defines it). Signatures are over every attempt that ran, warm-ups and the tries a retry
replaced included, so a hang that a retry hid, or a crash in a warm-up, is still seen. A side
whose case-level checks failed (identical outputs across repeats, a latency budget) counts
every run as failed with the check's name as signature, since no single attempt carries that
failure.

The rule (DESIGN "Which attempts count", issue 18):

- a side with no measured run that ran (skipped, declined by the budget, never reached) makes
  the case ``missing``, with why; both sides skipped for the same reason is ``skipped``;
- a failure signature seen on head and never on base is ``new_failure`` with its rate
  ("2 of 7 head runs, 0 of 7 base"), however intermittent, unless the case file declares the
  case known-flaky (``known_flaky``), which downgrades an intermittent one to ``flaky`` and
  says so;
- both sides failing every run on the same infrastructure signatures only (every failed try
  of each side carries one, :mod:`harness.model.infra`) is ``infrastructure``: not a code
  failure, never a regression, a new failure or no change (exit 3, as the run's);
- both sides failing every run with the same signatures is ``pre_existing_failure``; base
  failing every run and head never is ``fixed``;
- failures both sides show, intermittently, are ``flaky`` unless head fails significantly
  more often (one-sided Fisher exact test), which is ``new_failure``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from harness.compare.stats import head_fails_more_p
from harness.model import (
    FAILING,
    CaseResult,
    FailureMatrix,
    failed_tries,
    failure_signature,
    finals,
    harness_fault,
    ran,
    runs,
    warmup_runs,
)
from harness.model.infra import describe


@dataclass(frozen=True)
class _Side:
    passed: int  # measured runs whose final attempt passed
    failed: int  # measured runs whose final attempt failed
    signatures: tuple[str, ...]  # every failure seen in any attempt that ran
    runs: int  # runs that ran (warm-ups included): the denominator of a rate
    hit: dict[str, int]  # signature -> runs (warm-ups included) that showed it
    retried: int  # measured runs a retry passed after a failed try
    not_run: str | None  # why the side has no measured run, if it has none


def _not_run_reason(result: CaseResult | None) -> str:
    if result is None:
        return "not in this side's results"
    if result.status == "skipped":
        return f"skipped: {result.reason or 'no reason given'}"
    if any(a.status == "budget_declined" for a in result.attempts):
        return "not run: the time budget declined it"
    return result.reason or "no measured run"


def _side(result: CaseResult | None) -> _Side:
    if result is None:
        return _Side(0, 0, (), 0, {}, 0, _not_run_reason(None))
    # an attempt the harness broke ran none of the code under test: the comparison is
    # incomplete (exit 3) and the case is judged on what did run, or missing with why
    attempts = tuple(a for a in result.attempts if not harness_fault(a))
    measured = [a for a in finals(attempts) if a.status in {*FAILING, "passed"}]
    if not measured:
        faults = [a for a in result.attempts if harness_fault(a)]
        if faults and faults[0].error is not None:
            why = f"the harness failed on every run ({faults[0].error.message.splitlines()[0]})"
            return _Side(0, 0, (), 0, {}, 0, why)
        return _Side(0, 0, (), 0, {}, 0, _not_run_reason(result))
    failed = [a for a in measured if a.status in FAILING]
    slots = [*warmup_runs(attempts), *runs(attempts)]
    hit: dict[str, int] = {}
    for slot in slots:
        for sig in {failure_signature(t) for t in slot.tries if t.status in FAILING}:
            hit[sig] = hit.get(sig, 0) + 1
    sigs = {failure_signature(a) for a in failed_tries(attempts)}
    ran_slots = sum(1 for s in slots if ran(s.tries))
    retried = sum(1 for r in runs(attempts) if r.retried and r.final.status == "passed")
    passed = len(measured) - len(failed)
    case_level = [
        c.name
        for c in result.checks
        if c.blocking and not any(c is x for a in measured for x in a.checks)
    ]
    if result.status == "failed" and not failed and case_level:
        # a case-level check (a budget, identical outputs) failed the case, not an attempt
        case_sigs = {f"CaseCheck:{n}" for n in case_level}
        hit.update(dict.fromkeys(case_sigs, len(measured)))
        return _Side(
            0, len(measured), tuple(sorted(sigs | case_sigs)), ran_slots, hit, retried, None
        )
    return _Side(passed, len(failed), tuple(sorted(sigs)), ran_slots, hit, retried, None)


def _infra_only(result: CaseResult | None) -> frozenset[str]:
    """The infrastructure signatures of a side's failed tries, when every failed try has one;
    empty otherwise (some failure was the code's, or nothing failed)."""
    if result is None:
        return frozenset()
    failed = [a for a in failed_tries(result.attempts) if not harness_fault(a)]
    if not failed or not all(a.infra for a in failed):
        return frozenset()
    return frozenset(a.infra for a in failed)


def _rate(sig: str, side: _Side, name: str) -> str:
    return f"{side.hit.get(sig, 0)} of {side.runs} {name} runs"


def failure_matrix(
    base: CaseResult | None,
    head: CaseResult | None,
    *,
    alpha: float = 0.05,
    known_flaky: str | None = None,
) -> FailureMatrix:
    """``infrastructure``, ``new_failure``, ``pre_existing_failure``, ``fixed``, ``flaky`` or
    ``no_change`` (both
    sides always passed, no failure in any attempt); ``missing`` when a side has no measured
    run, ``skipped`` when both sides skipped it for the same reason. ``known_flaky`` is the
    case file's reason for declaring the case known-flaky, if it does."""
    b, h = _side(base), _side(head)

    def make(verdict: str, reason: str | None = None, p: float | None = None) -> FailureMatrix:
        return FailureMatrix(
            verdict,
            b.passed,
            b.failed,
            h.passed,
            h.failed,
            b.signatures,
            h.signatures,
            p,
            reason,
            head_only=tuple(s for s in h.signatures if s not in b.signatures),
            base_runs=b.runs,
            head_runs=h.runs,
            base_retried=b.retried,
            head_retried=h.retried,
            known_flaky=known_flaky,
        )

    if b.not_run is not None or h.not_run is not None:
        if b.not_run is not None and b.not_run == h.not_run and b.not_run.startswith("skipped"):
            return make("skipped", f"both sides {b.not_run}")
        parts = [f"{n}: {s.not_run}" for n, s in (("base", b), ("head", h)) if s.not_run]
        return make("missing", "; ".join(parts))
    infra = _infra_only(head)
    if infra and infra == _infra_only(base) and b.passed == 0 and h.passed == 0:
        what = "; ".join(describe(s) for s in sorted(infra))
        return make("infrastructure", f"infrastructure on both sides: {what}; not a code failure")
    new = [s for s in h.signatures if s not in b.signatures]
    if new:
        rates = "; ".join(f"{s}: {_rate(s, h, 'head')}, 0 of {b.runs} base" for s in new)
        every = h.passed == 0
        if known_flaky and not every:
            return make(
                "flaky",
                f"known flaky ({known_flaky}); head-only failure {rates}",
            )
        what = "head fails every run" if every and b.failed == 0 else "head-only failure"
        if h.failed == 0:
            what = "head-only failure hidden by a retry or in a warm-up"
        return make("new_failure", f"{what}: {rates}")
    if not b.signatures and not h.signatures:
        return make("no_change")
    if h.failed == 0 and not h.signatures:
        if b.passed == 0:
            return make("fixed", f"base failed: {', '.join(b.signatures)}")
        rates = ", ".join(f"{s}: {_rate(s, b, 'base')}" for s in b.signatures)
        return make("flaky", f"base only, intermittent: {rates}")
    if h.passed == 0 and b.passed == 0:
        return make("pre_existing_failure", f"both fail every run: {', '.join(h.signatures)}")
    p = head_fails_more_p(b.passed, b.failed, h.passed, h.failed)
    shared = "; ".join(f"{s}: {_rate(s, h, 'head')}, {_rate(s, b, 'base')}" for s in h.signatures)
    if p <= alpha * (1 + 1e-9) and h.failed > b.failed:
        return make(
            "new_failure",
            f"head fails significantly more often (Fisher p={p:.3g}): {shared}",
            p,
        )
    return make("flaky", f"both sides fail intermittently: {shared} (Fisher p={p:.3g})", p)


def head_only(matrix: FailureMatrix) -> bool:
    """True when head showed a failure signature base never did (in any attempt)."""
    return bool(matrix.head_only)


def settled_by_failures(matrix: FailureMatrix, rounds: int, max_rounds: int) -> bool:
    """Whether a live comparison can stop buying rounds for a case with this matrix: a
    failure one side shows intermittently keeps buying rounds (up to ``max_rounds`` per side),
    so its rate is measured rather than settled at the first look."""
    if matrix.verdict in ("no_change", "missing", "skipped"):
        return matrix.verdict != "no_change"
    deterministic = (matrix.head_passed == 0 or matrix.head_failed == 0) and (
        matrix.base_passed == 0 or matrix.base_failed == 0
    )
    hidden = matrix.head_retried or matrix.base_retried
    return rounds >= max_rounds or (deterministic and not hidden and not matrix.head_only)


__all__: Sequence[str] = ("failure_matrix", "head_only", "settled_by_failures")
