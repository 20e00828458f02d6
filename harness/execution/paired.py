"""Base and head through one executor: the interleaved schedule as a second loop of the runner.

:class:`PairedRunner` is a :class:`~harness.execution.run.Runner` whose executor serves two
sides, each with its own persistent worker and import path. It runs
:class:`~harness.execution.schedule.Interleaved` schedules (one round = every selected case
once per side, the side going first alternating), any number of times, so a comparison can buy
rounds in batches; every attempt goes through the runner's ``run_unit`` (retries, budget,
journal) exactly as in ``harness run``. ``reports()`` turns each side's attempts into one
:class:`~harness.model.RunReport` per side with the same pure ``aggregate``.
"""

from __future__ import annotations

import traceback
from collections.abc import Mapping, Sequence

from harness.cases import PlanItem
from harness.execution.aggregate import aggregate, skipped
from harness.execution.executor import Executor
from harness.execution.run import Runner, RunOptions, _now
from harness.execution.schedule import Interleaved
from harness.execution.workers import SideSpec
from harness.model import Attempt, CaseResult, LoadError, RunReport, Side


class PairedRunner(Runner):
    """Runs plan items for base and head, interleaved, through one two-sided executor."""

    def __init__(self, options: RunOptions, sides: Mapping[Side, SideSpec]) -> None:
        super().__init__(options, side="head")
        self.executor.close()
        self.sides = dict(sides)
        self.executor = Executor(
            run_dir=self.run_dir,
            profile=options.profile,
            sides=self.sides,
            references_root=options.references_root,
            preimport=options.preimport,
            say=self._say,
        )
        # (side, item name) -> every attempt of that case on that side, in order
        self.attempts: dict[tuple[Side, str], list[Attempt]] = {}
        self.next_round = 0
        self._warmed: set[str] = set()

    def side_attempts(self, side: Side, item: PlanItem) -> list[Attempt]:
        return self.attempts.setdefault((side, item.name), [])

    def run_rounds(self, items: Sequence[PlanItem], rounds: int) -> int:
        """``rounds`` more interleaved rounds of ``items`` (warm-ups of a case on its first
        batch only); returns the number of rounds run (fewer when a stop was requested)."""
        runnable = [i for i in items if i.skip_reason is None]
        if not runnable or rounds <= 0:
            return 0
        self.executor.check_devices(i.platform for i in runnable)
        cold = [i for i in runnable if i.name not in self._warmed]
        warm = Interleaved(cold, rounds=0) if cold else None
        done = 0
        try:
            if warm is not None:
                for unit in warm:
                    self.run_unit(unit, self.side_attempts(unit.side, unit.item))
                    if self.stop_requested:
                        return 0
            self._warmed.update(i.name for i in cold)
            for _ in range(rounds):
                schedule = Interleaved(
                    runnable, rounds=1, first_round=self.next_round, warmup=False
                )
                for unit in schedule:
                    final = self.run_unit(unit, self.side_attempts(unit.side, unit.item))
                    schedule.feedback(unit, final)
                    if self.stop_requested:
                        return done
                self.next_round += 1
                done += 1
        except Exception as exc:  # a bug of the harness: recorded, the comparison ends here
            msg = f"interleaved rounds: harness error {type(exc).__name__}: {exc}"
            self.harness_errors.append(msg)
            self._say(msg + "\n" + traceback.format_exc())
        return done

    def result(self, side: Side, item: PlanItem) -> CaseResult:
        """One side's result for one case, from its attempts so far (pure aggregate)."""
        if item.skip_reason is not None:
            return skipped(item, item.skip_reason, side=side)
        attempts = self.attempts.get((side, item.name), [])
        if not attempts:
            return skipped(item, "not run", side=side)
        prof = self.options.profile
        rounds = {a.round for a in attempts if not a.warmup}
        return aggregate(
            item,
            attempts,
            planned_runs=item.case.warmup + len(rounds),
            budget={**item.case.budget, **prof.budgets.get(item.case.id, {})},
            interrupted=self.stop_requested,
            repeats=len(rounds),
            side=side,
            **self.executor.judging(side, item),
        )

    def reports(
        self, items: Sequence[PlanItem], load_errors: Sequence[LoadError] = ()
    ) -> dict[Side, RunReport]:
        """Close workers and the journal; one report per side (env collected per side)."""
        self.executor.close()
        self.journal.close()
        finished = _now()
        out: dict[Side, RunReport] = {}
        for side, spec in self.sides.items():
            env = dict(self.executor.env.get(side) or {"error": "no worker started"})
            env["code_roots"] = list(spec.code_roots)
            if spec.repo is not None:
                env["checkout"] = spec.repo
            if spec.rev is not None:
                env["rev"] = spec.rev
            out[side] = RunReport(
                run_id=f"{self.run_id}-{side}",
                started_at=self.started_at,
                finished_at=finished,
                argv=self.options.argv,
                runner=self.options.profile.name,
                env=env,
                cases=tuple(self.result(side, i) for i in items),
                interrupted=self.interrupted,
                budget_s=self.budget.total_s,
                load_errors=tuple(load_errors),
                infra_errors=tuple(self.infra_errors),
            )
        return out


__all__ = ["PairedRunner"]
