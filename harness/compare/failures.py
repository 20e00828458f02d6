"""The failure matrix of one case: pass/fail counts per side and what the failures were.

Counts are over measured runs (the final attempt of each round; a retry replaces the attempt it
retried). A side whose case-level checks failed (identical outputs across repeats, a latency
budget) counts every run as failed with the check's name as signature, since no single attempt
carries that failure.
"""

from __future__ import annotations

from collections.abc import Sequence

from harness.compare.stats import head_fails_more_p
from harness.model import FAILING, Attempt, CaseResult, FailureMatrix


def _finals(attempts: Sequence[Attempt]) -> list[Attempt]:
    finals: dict[tuple[int, int], Attempt] = {}
    for a in attempts:
        if not a.warmup and a.status != "budget_declined":
            finals[(a.round, a.repeat)] = a
    return [finals[k] for k in sorted(finals)]


def _side(result: CaseResult | None) -> tuple[int, int, tuple[str, ...]]:
    if result is None:
        return 0, 0, ()
    finals = _finals(result.attempts)
    failed = [a for a in finals if a.status in FAILING]
    sigs = {a.error.signature if a.error else a.status for a in failed}
    passed = len(finals) - len(failed)
    case_level = [
        c.name
        for c in result.checks
        if c.blocking and not any(c is x for a in finals for x in a.checks)
    ]
    if result.status == "failed" and not failed and case_level:
        sigs = {f"CaseCheck:{n}" for n in case_level}
        return 0, len(finals), tuple(sorted(sigs))
    return passed, len(failed), tuple(sorted(sigs))


def failure_matrix(
    base: CaseResult | None, head: CaseResult | None, *, alpha: float = 0.05
) -> FailureMatrix:
    """``new_failure``, ``pre_existing_failure``, ``fixed``, ``flaky`` or ``no_change``
    (both sides always passed); ``missing`` when a side has no measured run."""
    bp, bf, bsig = _side(base)
    hp, hf, hsig = _side(head)

    def make(verdict: str, reason: str | None = None, p: float | None = None) -> FailureMatrix:
        return FailureMatrix(verdict, bp, bf, hp, hf, bsig, hsig, p, reason)

    if bp + bf == 0 or hp + hf == 0:
        side = "base" if bp + bf == 0 else "head"
        res = base if side == "base" else head
        why = res.reason if res is not None and res.reason else "no measured run"
        return make("missing", f"{side}: {why}")
    if bf == 0 and hf == 0:
        return make("no_change")
    if hp == 0 and bp == 0:
        new = sorted(set(hsig) - set(bsig))
        if new:
            return make(
                "new_failure", f"both sides fail, head with a new signature: {', '.join(new)}"
            )
        return make("pre_existing_failure", f"both fail: {', '.join(hsig)}")
    if bf == 0 and hp == 0:
        return make("new_failure", f"head fails every run: {', '.join(hsig)}")
    if hf == 0 and bp == 0:
        return make("fixed", f"base failed: {', '.join(bsig)}")
    p = head_fails_more_p(bp, bf, hp, hf)
    if p <= alpha * (1 + 1e-9):
        return make(
            "new_failure",
            f"flaky, and head fails significantly more often (Fisher p={p:.3g})",
            p,
        )
    return make(
        "flaky",
        f"mixed results: base {bp}/{bp + bf}, head {hp}/{hp + hf} passed "
        f"(Fisher p={p:.3g} that head fails more)",
        p,
    )
