"""Schedules: the order in which (side, case, run) units go to the executor.

A schedule knows nothing about workers; it yields :class:`Unit` s and hears back the final
attempt of each, so a linear run and an interleaved A B B A comparison are two schedules over
the same executor.

* :class:`Linear` (``harness run``): case after case; for each, its warm-ups then its measured
  repeats; a case stops at its first run that does not pass.
* :class:`Interleaved` (comparisons): warm-ups of every case on both sides first (recorded as
  warm-up, never measured), then rounds; one round runs every case once per side, and the side
  that goes first alternates from round to round (A B, B A, A B, ...), so slow drift of the
  machine hits both sides alike.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from harness.cases import PlanItem
from harness.model import Attempt, Side


@dataclass(frozen=True)
class Unit:
    """One warm-up or measured run of one case for one side (retries stay inside it)."""

    side: Side
    item: PlanItem
    repeat: int
    warmup: bool = False
    round: int = 0


class Linear:
    """Every case in plan order, each run to completion before the next case starts."""

    def __init__(
        self, items: Sequence[PlanItem], *, repeats: int | None = None, side: Side = "head"
    ) -> None:
        self.items = list(items)
        self.repeats = repeats
        self.side = side
        self._failed: set[str] = set()

    def runs_of(self, item: PlanItem) -> list[Unit]:
        case = item.case
        repeats = self.repeats if self.repeats is not None else case.repeats
        warm = [Unit(self.side, item, w, warmup=True) for w in range(case.warmup)]
        return warm + [Unit(self.side, item, r) for r in range(repeats)]

    def units(self, item: PlanItem) -> Iterator[Unit]:
        """The units of one case, stopping after the first run that does not pass."""
        for unit in self.runs_of(item):
            if item.name in self._failed:
                return
            yield unit

    def feedback(self, unit: Unit, final: Attempt) -> None:
        if final.status != "passed":
            self._failed.add(unit.item.name)


class Interleaved:
    """Base and head alternating per round (A B, B A, ...), every case ``runs_per_round`` times
    per side per round.

    With several runs per round, a case's runs keep alternating inside the round (A B B A A B
    for three), so the two sides' runs of one round sit next to each other in time; run ``j``
    of round ``r`` is repeat ``r * runs_per_round + j`` (one run per round: repeat ``r``).
    """

    def __init__(
        self,
        items: Sequence[PlanItem],
        *,
        rounds: int,
        sides: tuple[Side, Side] = ("base", "head"),
        first_round: int = 0,
        warmup: bool = True,
        runs_per_round: int = 1,
    ) -> None:
        if runs_per_round < 1:
            raise ValueError(f"runs_per_round: expected an int >= 1, got {runs_per_round!r}")
        self.runs_per_round = runs_per_round
        self.items = list(items)
        self.rounds = rounds
        self.sides = sides
        self.first_round = first_round
        self.warmup = warmup

    def order(self, round_: int) -> tuple[Side, Side]:
        a, b = self.sides
        return (a, b) if round_ % 2 == 0 else (b, a)

    def __iter__(self) -> Iterator[Unit]:
        if self.warmup:
            for item in self.items:
                for w in range(item.case.warmup):
                    for side in self.sides:
                        yield Unit(side, item, w, warmup=True)
        m = self.runs_per_round
        for r in range(self.first_round, self.first_round + self.rounds):
            for item in self.items:
                for j in range(m):
                    first, second = self.order(r + j)
                    yield Unit(first, item, r * m + j, round=r)
                    yield Unit(second, item, r * m + j, round=r)

    def feedback(self, unit: Unit, final: Attempt) -> None:
        """Failures are counted, not skipped: the failure matrix needs both sides' counts."""
