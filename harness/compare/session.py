"""Sequential rounds of a live comparison: looks at 3, 5, 7 rounds and confirmation batches.

A :class:`Session` drives a :class:`~harness.execution.paired.PairedRunner`: it asks
:func:`~harness.compare.sequential.plan_rounds` which cases get how many more rounds (undecided
cases first, then the fresh batches that confirm a detected regression), runs those rounds
interleaved, and takes each case's next look, until every case is settled or the time budget
is spent. The detection batch and the confirmation batch of a case are separate sets of
rounds, each judged on its own with every stage re-judged
(:func:`~harness.compare.latency.decide_stages`, :func:`~harness.compare.latency.confirm`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from harness.cases import PlanItem
from harness.compare.failures import failure_matrix, settled_by_failures
from harness.compare.latency import LatencySettings, case_verdict, confirm, decide_stages
from harness.compare.sequential import CaseProgress, plan_rounds
from harness.execution.paired import PairedRunner
from harness.model import Side, StageLatency


@dataclass
class CaseState:
    """Where one case stands: its detection rounds, its confirmation rounds, its findings."""

    item: PlanItem
    detect: list[int] = field(default_factory=list)
    fresh: list[int] = field(default_factory=list)
    confirming: bool = False
    verdict: str | None = None  # the latest look's verdict (of the current batch)
    settled: bool = False
    detection: list[StageLatency] = field(default_factory=list)
    confirmation: list[StageLatency] | None = None

    def progress(self) -> CaseProgress:
        if self.settled:
            return CaseProgress("no_change", len(self.detect))
        rounds = len(self.fresh) if self.confirming else len(self.detect)
        return CaseProgress(self.verdict, rounds, self.confirming)  # type: ignore[arg-type]

    def stages(self) -> list[StageLatency]:
        """The stage verdicts to report: detection, with regressions confirmed or suspect."""
        if not any(s.verdict == "regression" and s.judged for s in self.detection):
            return list(self.detection)
        return confirm(self.detection, self.confirmation)


class Session:
    """Runs a comparison's rounds within a budget of seconds."""

    def __init__(
        self,
        runner: PairedRunner,
        items: Sequence[PlanItem],
        settings: LatencySettings,
        *,
        budget_s: float | None,
        say: Callable[[str], None] = lambda _l: None,
    ) -> None:
        self.runner = runner
        self.settings = settings
        self.states = {i.name: CaseState(i) for i in items if i.skip_reason is None}
        self.budget_s = budget_s
        self.t0 = time.monotonic()
        self.say = say
        self.round_cost: list[float] = []  # seconds per case-round so far

    def _rounds_left(self) -> int:
        if self.budget_s is None:
            return 10**6
        left = self.budget_s - (time.monotonic() - self.t0)
        if not self.round_cost:
            return 10**6 if left > 0 else 0
        per = sum(self.round_cost) / len(self.round_cost)
        return max(0, int(left / max(per, 1e-3)))

    def run(self) -> None:
        looks = self.settings.looks
        while not self.runner.stop_requested:
            progress = {n: s.progress() for n, s in self.states.items()}
            grants = plan_rounds(progress, self._rounds_left(), looks=looks)
            if not grants:
                break
            self.say(
                "rounds: "
                + ", ".join(
                    f"{n} +{k}{' (confirming)' if self.states[n].confirming else ''}"
                    for n, k in grants.items()
                )
            )
            for n, s in self.states.items():
                if n in grants and s.verdict == "regression" and not s.confirming:
                    s.confirming = True
                    s.verdict = None
            for k in range(max(grants.values())):
                batch = [self.states[n] for n, g in grants.items() if g > k]
                batch = [s for s in batch if not s.settled]
                if not batch:
                    break
                t0 = time.monotonic()
                if self.runner.run_rounds([s.item for s in batch], 1) == 0:
                    return
                self.round_cost.append((time.monotonic() - t0) / len(batch))
                r = self.runner.next_round - 1
                for s in batch:
                    (s.fresh if s.confirming else s.detect).append(r)
                    if self._skipped(s):
                        self._look(s)  # a skip is the same in every round: settled now
            for n in grants:
                if not self.states[n].settled:
                    self._look(self.states[n])

    def _skipped(self, s: CaseState) -> bool:
        """Whether a side skipped the case (a ``requires`` module its Python cannot import, a
        platform it does not have): decided by the side's checkout and environment, so the
        same in every round; more rounds, each in fresh workers, cannot change it."""
        sides: tuple[Side, ...] = ("base", "head")
        return any(self.runner.result(side, s.item).status == "skipped" for side in sides)

    def _look(self, s: CaseState) -> None:
        base = self.runner.side_attempts("base", s.item)
        head = self.runner.side_attempts("head", s.item)
        fm = failure_matrix(
            self.runner.result("base", s.item),
            self.runner.result("head", s.item),
            known_flaky=s.item.case.known_flaky,
        )
        if fm.verdict != "no_change":
            # A failing case is not timed: its failure is the finding. One whose failures are
            # intermittent, or seen on head only, keeps buying rounds to the last look (while
            # the budget lasts), so its rate is measured, not settled at the first look.
            looks = self.settings.looks
            if s.confirming or settled_by_failures(fm, len(s.detect), max(looks)):
                s.settled = True
            else:
                s.verdict = "inconclusive"
            return
        name = s.item.name
        # on the CPU, other processes' load is not the code's time (DESIGN: contention)
        cf = s.item.platform == "cpu"
        if s.confirming:
            # the fresh batch re-judges every stage; confirm() counts any regression it finds
            flagged = {x.stage for x in s.detection if x.verdict == "regression" and x.judged}
            s.confirmation = decide_stages(
                base,
                head,
                self.settings,
                case=name,
                rounds=set(s.fresh),
                contention_free=cf,
                flagged=flagged,
            )
            s.verdict = case_verdict(s.confirmation)
        else:
            s.detection = decide_stages(
                base, head, self.settings, case=name, rounds=set(s.detect), contention_free=cf
            )
            s.verdict = case_verdict(s.detection)
        if s.verdict == "missing" or (s.verdict == "regression" and not self.settings.confirm):
            s.settled = True
