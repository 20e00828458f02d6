"""Sequential looks, confirmation and round scheduling for latency comparisons.

A comparison buys rounds (one run of base and one of head, in A B B A order) in steps: it
looks at 3 rounds, and while the verdict is inconclusive at 5 and then 7. A regression found
that way is only reported once a fresh batch of rounds, judged on its own, finds it again;
otherwise the verdict is ``suspect``. The looks are at fixed sizes so that the false-alarm and
power figures simulated for them (``bench/bench_decision_rule.py``) hold.

``compare_sequentially`` drives one case from a callable that produces one more round (real
runs or a simulation). ``plan_rounds`` is the scheduling decision for many cases sharing a
budget of rounds, kept separate and pure so that the executor only has to carry it out.

Example::

    >>> feed = rounds_from([1.00, 1.01, 0.99, 1.00, 1.01, 0.99], [1.20, 1.21, 1.19] * 2)
    >>> result = compare_sequentially(feed)
    >>> result.verdict, result.rounds, result.confirmation_rounds
    ('regression', 3, 3)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Literal

from harness.compare.stats import LatencyDecision, Verdict, decide_latency, margin_for

SequentialVerdict = Literal["regression", "improvement", "no_change", "inconclusive", "suspect"]
Round = tuple[float, float]
NextRound = Callable[[], Round | None]
"""Produces the next round as ``(base_seconds, head_seconds)``, or None when none is left."""

LOOKS: tuple[int, ...] = (3, 5, 7)


def _check_looks(looks: Sequence[int]) -> tuple[int, ...]:
    out = tuple(looks)
    ok = bool(out) and all(isinstance(n, int) and n >= 1 for n in out)
    if not ok or any(a >= b for a, b in pairwise(out)):
        raise ValueError(f"looks: expected increasing positive ints, got {looks!r}")
    return out


@dataclass(frozen=True)
class Batch:
    """One batch of rounds judged on its own: the samples, the looks taken, the last decision.

    ``decision`` is None when the rounds ran out before the first look.
    """

    base: tuple[float, ...]
    head: tuple[float, ...]
    looks: tuple[int, ...]
    decision: LatencyDecision | None

    @property
    def rounds(self) -> int:
        return len(self.base)

    @property
    def verdict(self) -> Verdict:
        return "inconclusive" if self.decision is None else self.decision.verdict


def run_batch(
    next_round: NextRound,
    *,
    looks: Sequence[int] = LOOKS,
    delta: float = 0.05,
    noise: float | None = None,
    alpha: float = 0.05,
) -> Batch:
    """Collect rounds up to each look in turn and stop at the first decided one.

    A look is taken only at the sizes in ``looks``; if ``next_round`` runs dry between two
    looks, the batch keeps the rounds it got and the decision of its last complete look.
    """
    steps = _check_looks(looks)
    margin_for(delta, noise)  # fail on bad arguments before any round is spent
    base: list[float] = []
    head: list[float] = []
    taken: list[int] = []
    decision: LatencyDecision | None = None
    for size in steps:
        while len(base) < size:
            pair = next_round()
            if pair is None:
                return Batch(tuple(base), tuple(head), tuple(taken), decision)
            b, h = pair
            base.append(float(b))
            head.append(float(h))
        decision = decide_latency(base, head, delta=delta, noise=noise, alpha=alpha)
        taken.append(size)
        if decision.verdict != "inconclusive":
            break
    return Batch(tuple(base), tuple(head), tuple(taken), decision)


@dataclass(frozen=True)
class SequentialResult:
    """The verdict on one stage after sequential looks and, for a regression, confirmation.

    ``detection`` is the batch that found the verdict; ``confirmation`` the fresh batch run
    to confirm a regression (None when there was nothing to confirm or confirmation was off).
    """

    verdict: SequentialVerdict
    detection: Batch
    confirmation: Batch | None
    reason: str

    @property
    def decision(self) -> LatencyDecision | None:
        """The decision reported for the case: the detection batch's."""
        return self.detection.decision

    @property
    def rounds(self) -> int:
        """Rounds of the detection batch."""
        return self.detection.rounds

    @property
    def confirmation_rounds(self) -> int:
        return 0 if self.confirmation is None else self.confirmation.rounds

    @property
    def total_rounds(self) -> int:
        return self.rounds + self.confirmation_rounds


def compare_sequentially(
    next_round: NextRound,
    *,
    looks: Sequence[int] = LOOKS,
    confirm: bool = True,
    delta: float = 0.05,
    noise: float | None = None,
    alpha: float = 0.05,
) -> SequentialResult:
    """Looks at 3, 5 and 7 rounds, then confirms a regression with a fresh batch.

    The fresh batch takes the same looks and is judged on its own rounds only, so a chance
    extreme in the first batch cannot carry the second. A regression it does not find again,
    including one left unconfirmed because ``next_round`` ran dry, is ``suspect``.
    Improvements are not confirmed: they block nothing.
    """
    steps = _check_looks(looks)
    detection = run_batch(next_round, looks=steps, delta=delta, noise=noise, alpha=alpha)
    if detection.decision is None:
        reason = f"no look reached: {detection.rounds} round(s), first look at {steps[0]}"
        return SequentialResult("inconclusive", detection, None, reason)
    found = detection.decision.verdict
    if found != "regression" or not confirm:
        return SequentialResult(found, detection, None, detection.decision.explain())
    confirmation = run_batch(next_round, looks=steps, delta=delta, noise=noise, alpha=alpha)
    if confirmation.verdict == "regression":
        return SequentialResult("regression", detection, confirmation, detection.decision.explain())
    if confirmation.decision is None:
        why = f"no rounds left to confirm it ({confirmation.rounds} round(s) in the fresh batch)"
    else:
        why = f"the fresh batch says {confirmation.decision.explain()}"
    reason = f"{detection.decision.explain()}; not confirmed: {why}"
    return SequentialResult("suspect", detection, confirmation, reason)


def rounds_from(base: Sequence[float], head: Sequence[float]) -> NextRound:
    """A ``NextRound`` that replays recorded rounds ``(base[i], head[i])`` and then says None."""
    if len(base) != len(head):
        raise ValueError(f"base and head need one sample per round: {len(base)} != {len(head)}")
    pairs = iter(zip(base, head, strict=True))

    def next_round() -> Round | None:
        pair = next(pairs, None)
        return None if pair is None else (float(pair[0]), float(pair[1]))

    return next_round


# --- scheduling --------------------------------------------------------------------------------


@dataclass(frozen=True)
class CaseProgress:
    """Where one case stands: the verdict of its current batch's last look and its rounds.

    ``verdict`` is None before the first look. ``confirming`` says the current batch is the
    fresh batch confirming a regression (its ``rounds`` count that batch only).
    """

    verdict: SequentialVerdict | None
    rounds: int
    confirming: bool = False


def _need(progress: CaseProgress, looks: tuple[int, ...]) -> tuple[int, int] | None:
    """(tier, rounds to the next look) for a case that wants rounds, None for a settled one."""
    tier = 1 if progress.confirming else 0
    if progress.verdict in (None, "inconclusive"):
        ahead = [n for n in looks if n > progress.rounds]
        return (tier, ahead[0] - progress.rounds) if ahead else None
    if progress.verdict == "regression" and not progress.confirming:
        return (1, looks[0])
    return None


def plan_rounds(
    progress: Mapping[str, CaseProgress], budget: int, *, looks: Sequence[int] = LOOKS
) -> dict[str, int]:
    """Which cases get how many more rounds, within ``budget`` rounds in all.

    A case is granted exactly the rounds to its next look, never a part of it. Order:
    undecided detection batches first (not started or inconclusive; fewest rounds first, since
    their next look is worth most), then confirmation work (a fresh batch for a detected
    regression, or the next look of an inconclusive fresh batch); ties by case name. A grant
    that does not fit what is left is skipped so that a cheaper one further down can use it.

        >>> plan_rounds({"a": CaseProgress("inconclusive", 3), "b": CaseProgress("regression", 3),
        ...              "c": CaseProgress(None, 0)}, budget=6)
        {'c': 3, 'a': 2}
    """
    steps = _check_looks(looks)
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
        raise ValueError(f"budget: expected a non-negative int (rounds), got {budget!r}")
    wanted = []
    for name, p in progress.items():
        need = _need(p, steps)
        if need is not None:
            wanted.append((need[0], p.rounds, name, need[1]))
    wanted.sort()
    left = budget
    grants: dict[str, int] = {}
    for _tier, _rounds, name, n in wanted:
        if n <= left:
            grants[name] = n
            left -= n
    return grants
