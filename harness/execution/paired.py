"""Base and head through one executor: the interleaved schedule as a second loop of the runner.

:class:`PairedRunner` is a :class:`~harness.execution.run.Runner` whose executor serves two
sides, each with its own persistent worker and import path. It runs
:class:`~harness.execution.schedule.Interleaved` schedules (one round = every selected case
once per side, the side going first alternating), any number of times, so a comparison can buy
rounds in batches; every attempt goes through the runner's ``run_unit`` (retries, budget,
journal) exactly as in ``harness run``. ``reports()`` turns each side's attempts into one
:class:`~harness.model.RunReport` per side with the same pure ``aggregate``.

**A fresh pair of workers per round** (``worker_per_round``, the default of ``harness
compare``): before every round after the first, both sides' workers are closed and new ones
started, and each case gets its warm-ups again in them (recorded with that round's number).
A process has a speed of its own (memory layout, page placement, where the scheduler put it):
on a loaded 2-core runner the same code's DenoisingStage read 0.66-1.28x between two
persistent workers, consistently over 7 rounds and over all four of its steps, which no
number of rounds averages out and a confirmation batch in the same workers would confirm.
With a new process per round, that speed is one more random effect of the round, so rounds
are exchangeable and the rank tests' error rates hold (asv's ``rounds`` and pyperf's worker
processes do the same). Each round's pair forks from a zygote of its own
(:mod:`harness.execution.zygote`): a zygote's exec lays out memory once, and every worker
forked from it inherits that layout. ``worker_per_round=False`` keeps one worker per side for
the whole comparison: faster, for comparisons whose subject is not latency.

**Several runs per round** (``runs_per_round``, 3 by default in ``harness compare`` with fresh
workers): each case runs that many times per side in the round's pair, alternating A B B A A B,
and latency takes the round's median per side as the round's one sample
(:func:`harness.compare.latency.round_samples`), so rounds stay the unit of N. On a shared VM
most of a run's scatter is the run's own (a single-thread matmul loop drifts by +-20 % within
one quiet process), not the process's: beside a CPU hog, t2va-int8's DenoisingStage scattered
by about 10 % between the runs of one worker while five workers' medians agreed within about
2 %. Starting a pair costs several seconds; each extra run costs one run.
"""

from __future__ import annotations

import traceback
from collections.abc import Mapping, Sequence
from dataclasses import replace

from harness.cases import PlanItem
from harness.execution import zygote
from harness.execution.aggregate import aggregate, skipped
from harness.execution.executor import Executor
from harness.execution.run import Runner, RunOptions, _now
from harness.execution.schedule import Interleaved, Unit
from harness.execution.workers import SideSpec
from harness.model import Attempt, CaseResult, LoadError, RunReport, Side
from harness.model.coverage import CoverageRecord


class PairedRunner(Runner):
    """Runs plan items for base and head, interleaved, through one two-sided executor."""

    def __init__(
        self,
        options: RunOptions,
        sides: Mapping[Side, SideSpec],
        *,
        worker_per_round: bool = True,
        runs_per_round: int = 1,
    ) -> None:
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
        self.worker_per_round = worker_per_round
        if worker_per_round:
            zygote.renew()  # the first round's pair too: no zygote of earlier work
        self.runs_per_round = runs_per_round
        self.worker_sets = 0  # how many times both sides' workers were started afresh
        self._rounds_in_workers = 0  # rounds the live workers have run (a new pair: 0)
        # item name -> warm-up runs planned per side (the first warm-up plus one per new pair)
        self._warmups: dict[str, int] = {}
        # (side, item name) -> what its coverage attempt recorded (run_coverage)
        self.coverage: dict[tuple[Side, str], CoverageRecord] = {}

    def side_attempts(self, side: Side, item: PlanItem) -> list[Attempt]:
        return self.attempts.setdefault((side, item.name), [])

    def run_rounds(self, items: Sequence[PlanItem], rounds: int) -> int:
        """``rounds`` more interleaved rounds of ``items``, each case warmed up first in every
        pair of workers it runs in; returns the number of rounds run (fewer when a stop was
        requested)."""
        runnable = [i for i in items if i.skip_reason is None]
        if not runnable or rounds <= 0:
            return 0
        self.executor.check_devices(i.platform for i in runnable)
        done = 0
        try:
            cold = [i for i in runnable if i.name not in self._warmed]
            for _ in range(rounds):
                if self.worker_per_round and self._rounds_in_workers:
                    # a new pair of processes, every case warmed up in it, for every round
                    # after the first (a case new to this batch included: once, not twice)
                    self.executor.close()
                    zygote.renew()  # the new pair forks from a new zygote: a new layout
                    self.worker_sets += 1
                    self._rounds_in_workers = 0
                    warm = runnable
                else:
                    warm = cold  # the live workers: only cases they have not warmed yet
                if warm and not self._warm(warm, self.next_round):
                    return done
                self._warmed.update(i.name for i in warm)
                cold = []
                schedule = Interleaved(
                    runnable,
                    rounds=1,
                    first_round=self.next_round,
                    warmup=False,
                    runs_per_round=self.runs_per_round,
                )
                for unit in schedule:
                    final = self.run_unit(unit, self.side_attempts(unit.side, unit.item))
                    schedule.feedback(unit, final)
                    if self.stop_requested:
                        return done
                self.next_round += 1
                self._rounds_in_workers += 1
                done += 1
        except Exception as exc:  # a bug of the harness: recorded, the comparison ends here
            msg = f"interleaved rounds: harness error {type(exc).__name__}: {exc}"
            self.harness_errors.append(msg)
            self._say(msg + "\n" + traceback.format_exc())
        return done

    def run_coverage(self, items: Sequence[PlanItem]) -> None:
        """One coverage attempt per case and side, after the timed rounds, in the workers of
        the last round (warm); a harness error is recorded and ends the coverage. The workers
        are closed after."""
        try:
            for item in items:
                if item.skip_reason is not None:
                    continue
                for side in ("base", "head"):
                    if self.stop_requested:
                        return
                    self.coverage[(side, item.name)] = self.take_coverage(side, item)
        except Exception as exc:  # a bug of the harness: recorded, the comparison goes on
            msg = f"coverage attempts: harness error {type(exc).__name__}: {exc}"
            self.harness_errors.append(msg)
            self._say(msg + "\n" + traceback.format_exc())
        finally:
            self.executor.close()

    def _warm(self, items: Sequence[PlanItem], round_: int) -> bool:
        """Each case's warm-up runs, both sides, numbered with the round they precede (so a
        new pair's warm-ups are runs of their own); False when a stop was requested."""
        for item in items:
            self._warmups[item.name] = self._warmups.get(item.name, 0) + item.case.warmup
            for w in range(item.case.warmup):
                for side in ("base", "head"):
                    unit = Unit(side, item, w, warmup=True, round=round_)
                    self.run_unit(unit, self.side_attempts(side, item))
                    if self.stop_requested:
                        return False
        return True

    def result(self, side: Side, item: PlanItem) -> CaseResult:
        """One side's result for one case, from its attempts so far (pure aggregate)."""
        if item.skip_reason is not None:
            return skipped(item, item.skip_reason, side=side)
        attempts = self.attempts.get((side, item.name), [])
        if not attempts:
            return skipped(item, "not run", side=side)
        prof = self.options.profile
        rounds = {a.round for a in attempts if not a.warmup}
        measured = len(rounds) * self.runs_per_round
        result = aggregate(
            item,
            attempts,
            planned_runs=self._warmups.get(item.name, item.case.warmup) + measured,
            budget={**item.case.budget, **prof.budgets.get(item.case.id, {})},
            interrupted=self.stop_requested,
            repeats=measured,
            side=side,
            **self.executor.judging(side, item),
        )
        found = self.coverage.get((side, item.name))
        return replace(result, coverage=found) if found is not None else result

    def reports(
        self,
        items: Sequence[PlanItem],
        load_errors: Sequence[LoadError] = (),
        *,
        close: bool = True,
    ) -> dict[Side, RunReport]:
        """Close workers (unless ``close`` is False: coverage attempts follow in them) and
        the journal; one report per side (env collected per side)."""
        if close:
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
                infra_errors=(
                    *self.executor.side_infra_errors.get(side, ()),
                    *self.harness_errors,
                ),
            )
        return out


__all__ = ["PairedRunner"]
