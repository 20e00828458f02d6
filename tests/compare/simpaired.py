"""A simulated stand-in for :class:`harness.execution.paired.PairedRunner`: what
:class:`harness.compare.session.Session` calls, answering with scripted Attempt records
(no worker process runs). ``script(side, round)`` gives one attempt's stage seconds."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from harness.cases import PlanItem
from harness.model import Attempt, Case, CaseResult, Side

Script = Callable[[Side, int], dict[str, float]]

ITEM = PlanItem(Case("sim/case", "pipeline", "simulated"), "cpu")


class SimulatedPairedRunner:
    def __init__(self, script: Script) -> None:
        self.script = script
        self.next_round = 0
        self.stop_requested = False
        self.attempts: dict[tuple[Side, str], list[Attempt]] = {}

    def side_attempts(self, side: Side, item: PlanItem) -> list[Attempt]:
        return self.attempts.setdefault((side, item.name), [])

    def run_rounds(self, items: Sequence[PlanItem], rounds: int) -> int:
        for _ in range(rounds):
            r = self.next_round
            for item in items:
                for side in ("base", "head") if r % 2 == 0 else ("head", "base"):
                    stages = self.script(side, r)  # type: ignore[arg-type]
                    got = self.side_attempts(side, item)  # type: ignore[arg-type]
                    got.append(
                        Attempt(
                            item.case.id,
                            item.platform,
                            len(got),
                            "passed",
                            0,
                            side=side,  # type: ignore[arg-type]
                            round=r,
                            stages=stages,
                            duration_s=sum(stages.values()) + 0.01,
                        )
                    )
            self.next_round += 1
        return rounds

    def result(self, side: Side, item: PlanItem) -> CaseResult:
        return CaseResult(
            item.case.id,
            item.case.kind,
            item.platform,
            "passed",
            attempts=tuple(self.side_attempts(side, item)),
        )
