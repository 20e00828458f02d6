"""Round scheduling for latency comparisons: which cases get how many more rounds.

A comparison buys rounds (one run of base and one of head, in A B B A order) in steps: it
looks at 3 rounds, and while the verdict is inconclusive at 5 and then 7. A regression found
that way is only reported once a fresh batch of rounds, judged on its own, finds one again;
otherwise the verdict is ``suspect``. The looks are at fixed sizes so that the error rate
spent at each (:func:`harness.compare.stats.spending`) and the false-alarm and power figures
measured on the session's own code (``bench/bench_decision_rule.py``) hold.

``plan_rounds`` is the scheduling decision for many cases sharing a budget of rounds, kept
separate and pure so that :class:`harness.compare.session.Session` only has to carry it out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Literal

SequentialVerdict = Literal["regression", "improvement", "no_change", "inconclusive", "suspect"]

LOOKS: tuple[int, ...] = (3, 5, 7)
MAX_ROUNDS = 200
# Where a batch allowed more rounds than 7 looks: about 1.4 times further each look, so a batch
# allowed more rounds (--rounds 20 on a noisy runner) still stops early on a clear result.
_FURTHER = (3, 5, 7, 10, 14, 20, 28, 40, 56, 80, 112, 160)


def looks_up_to(rounds: int | None) -> tuple[int, ...]:
    """Looks at 3, 5, 7 rounds, then 10, 14, 20, ... (each about 1.4x the last), cut at
    ``rounds`` (which is always the last look); :data:`LOOKS` where ``rounds`` is None.
    ``ValueError`` outside 2..200 (the entry points' ``--rounds`` and ``--harness-rounds``).

        >>> looks_up_to(None), looks_up_to(5), looks_up_to(20), looks_up_to(24)
        ((3, 5, 7), (3, 5), (3, 5, 7, 10, 14, 20), (3, 5, 7, 10, 14, 20, 24))
    """
    if rounds is None:
        return LOOKS
    if not 2 <= rounds <= MAX_ROUNDS:
        raise ValueError(f"expected an integer from 2 to {MAX_ROUNDS}")
    return (*(n for n in _FURTHER if n < rounds), rounds)


def _check_looks(looks: Sequence[int]) -> tuple[int, ...]:
    out = tuple(looks)
    ok = bool(out) and all(isinstance(n, int) and n >= 1 for n in out)
    if not ok or any(a >= b for a, b in pairwise(out)):
        raise ValueError(f"looks: expected increasing positive ints, got {looks!r}")
    return out


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
