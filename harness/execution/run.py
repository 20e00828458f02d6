"""The thin run loop: a plan in, attempts streamed to the journal, case results out.

It ties the pieces together and does nothing else: the schedule says what runs next, the
executor runs it, :mod:`.retry` decides about retries, the journal records every attempt as it
finishes, and :mod:`.aggregate` turns a case's attempts into its result. ``finish()`` always
returns a valid :class:`~harness.model.RunReport`, interrupted or not; writing it is the
caller's (:mod:`harness.report.io`).
"""

from __future__ import annotations

import datetime as dt
import os
import tempfile
import traceback
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.cases import PlanItem
from harness.errors import CaseFileError, UsageError
from harness.execution.aggregate import aggregate, skipped
from harness.execution.coverage import coverage_attempt
from harness.execution.executor import Executor
from harness.execution.inflight import Ahead
from harness.execution.journal import JournalWriter
from harness.execution.pool import WorkerPool
from harness.execution.pool import prestart as prestart_worker
from harness.execution.retry import Budget, with_retries
from harness.execution.schedule import Linear, Unit
from harness.execution.workers import SideSpec
from harness.fsio import slug
from harness.model import (
    FAILING,
    Attempt,
    CaseResult,
    ErrorInfo,
    LoadError,
    MissingCase,
    RunReport,
    ShardInfo,
    Side,
)
from harness.model.coverage import CoverageRecord
from harness.platforms.profile import Profile, RetryPolicy

Progress = Callable[[str], None]
ItemProgress = Callable[[int, int, str], None]


@dataclass(frozen=True)
class RunOptions:
    """Everything a run needs besides the plan."""

    profile: Profile = field(default_factory=Profile)
    out_root: Path = Path("reports")
    run_id: str | None = None
    code_roots: tuple[str, ...] = ()
    references_root: str | None = None
    repeats: int | None = None
    retries: int | None = None
    budget_s: float | None = None
    argv: tuple[str, ...] = ()
    cwd: str | None = None
    preimport: tuple[str, ...] | None = None
    write_latest: bool = True
    progress: Progress | None = None
    item_progress: ItemProgress | None = None
    # Stop starting cases after the first one that fails (failed, error, timeout, crashed);
    # the cases not run are recorded in the report's ``missing`` with the reason.
    fail_fast: bool = False
    # Which part of a sharded plan this run is (harness run --shard i/N), recorded as is.
    shard: ShardInfo | None = None
    # Compare every attempt with its layered reference (harness run --explain).
    explain: bool = False
    # One coverage attempt per case after its timed attempts (harness run --coverage).
    coverage: bool = False
    # What the run recorded about its case selection (harness run --changed-since).
    selection: Mapping[str, Any] | None = None


def new_run_id() -> str:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{uuid.uuid4().hex[:6]}"


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat()


# A run id is one folder name; file systems stop at 255 bytes, and a comparison's folder
# holds run folders of its own, so stay well below.
MAX_RUN_ID = 128


def check_run_id(run_id: str) -> str:
    """A run id names one folder under ``--out``: no separators, no ``..``, not ``latest``,
    at most :data:`MAX_RUN_ID` characters."""
    if slug(run_id) != run_id or run_id in ("latest", "LATEST"):
        raise UsageError(
            f"--run-id {run_id!r}: expected letters, digits, '.', '_' or '-' (not starting "
            "with '.', and not 'latest'), so that it names one folder under --out"
        )
    if len(run_id) > MAX_RUN_ID:
        raise UsageError(
            f"--run-id {run_id[:24]}...: {len(run_id)} characters; expected at most "
            f"{MAX_RUN_ID} (it names one folder under --out)"
        )
    return run_id


def run_import_roots(options: RunOptions) -> tuple[str, ...]:
    """The workers' import path of a run: its code roots, then the folder it runs in (where
    ``python -m`` would have found a package at the repository root)."""
    cwd = str(Path(options.cwd or Path.cwd()).resolve())
    return (*options.code_roots, *([cwd] if cwd not in options.code_roots else []))


def _executor(
    options: RunOptions, side: Side, run_dir: Path, say: Callable[[str], None] | None = None
) -> Executor:
    return Executor(
        run_dir=run_dir,
        profile=options.profile,
        # A run's code is its working folder's: import roots first, then the folder itself
        # (a comparison's sides get their checkouts' roots only: code provenance).
        sides={side: SideSpec(side, run_import_roots(options), cwd=options.cwd)},
        references_root=options.references_root,
        preimport=options.preimport,
        say=say,
        explain=options.explain,
    )


def prestart(options: RunOptions, platform: str, *, side: Side = "head") -> bool:
    """Start the zygote that the first worker of a run with ``options`` on ``platform`` will be
    forked from (:func:`harness.execution.pool.prestart`), before the run exists: ``harness
    run`` loads and plans its cases while it imports torch. Its output goes to a file in the
    temporary folder, removed once it says ready having said nothing. False: none started
    (forking off, shared zygotes, ...); the first worker then starts one as before."""
    try:
        executor = _executor(options, side, Path(tempfile.gettempdir()))  # starts no worker
        spec = executor.resolver.worker(side, platform)
    except Exception:  # only saves time: whatever is wrong here, the run itself says later
        return False
    log = Path(tempfile.gettempdir()) / f"harness-zygote-{os.getpid()}-prestart.log"
    return prestart_worker(spec, log)


class Runner:
    """Runs plan items for one side; one instance per run."""

    def __init__(self, options: RunOptions, *, side: Side = "head") -> None:
        self.options = options
        self.side = side
        self.run_id = check_run_id(options.run_id) if options.run_id else new_run_id()
        if options.out_root.exists() and not options.out_root.is_dir():
            raise UsageError(f"--out {options.out_root}: exists and is not a folder")
        self.run_dir = options.out_root / self.run_id
        try:
            self.run_dir.mkdir(parents=True, exist_ok=False)
        except FileExistsError:
            raise UsageError(
                f"--run-id {self.run_id}: {self.run_dir} already exists; pick another id"
            ) from None
        except OSError as exc:
            raise UsageError(
                f"--out {options.out_root}: cannot create {self.run_dir} "
                f"({exc.strerror or exc}); pick a folder this user can write"
            ) from None
        self.started_at = _now()
        self.executor = _executor(options, side, self.run_dir, say=self._say)
        budget = options.budget_s if options.budget_s is not None else options.profile.time_budget_s
        self.budget = Budget(budget)
        self.journal = JournalWriter(self.run_dir / "attempts.jsonl")
        self.results: list[CaseResult] = []
        self.last_server_user: dict[str, str] = {}  # named server -> the last case using it
        self.all_attempts: list[Attempt] = []
        self.stop_requested = False
        self.interrupted = False
        self.harness_errors: list[str] = []
        self.missing: list[MissingCase] = []
        self.failed_fast: str | None = None  # the case after whose failure --fail-fast stopped
        self._next_item: PlanItem | None = None  # the plan's item after the one running now

    @property
    def infra_errors(self) -> list[str]:
        return [*self.executor.infra_errors, *self.harness_errors]

    @property
    def pool(self) -> WorkerPool:
        return self.executor.pool

    def _say(self, line: str) -> None:
        if self.options.progress is not None:
            self.options.progress(line)

    def _record(self, attempt: Attempt) -> None:
        """Append one finished attempt to the write-ahead log, and flush it."""
        self.journal.append(attempt)
        self.all_attempts.append(attempt)

    def _policy(self, item: PlanItem) -> RetryPolicy:
        prof, case = self.options.profile, item.case
        retries = (
            self.options.retries
            if self.options.retries is not None
            else (case.retries if case.retries is not None else prof.retry.retries)
        )
        pol = self.executor.policy(item.platform)
        return RetryPolicy(retries, prof.retry.retry_on, pol.retry_patterns, pol.readiness_retry)

    # -- one unit, one case --------------------------------------------------------------------

    def run_unit(self, unit: Unit, attempts: list[Attempt], then: Unit | None = None) -> Attempt:
        """One warm-up or measured run of a case (with its retries), appended to ``attempts``.
        ``then``: the run that follows it if it passes (sent to the worker ahead, see
        :mod:`.inflight`)."""

        server_last = self._server_last(unit)

        def once(retry: int) -> Attempt:
            index = len(attempts)
            ahead = None
            if then is not None:
                nxt = index + 1 if then.item.name == unit.item.name else 0
                ahead = Ahead(then.side, then.item, nxt, then.repeat, then.warmup, then.round)
            attempt, _ = self.executor.run_job(
                unit.side,
                unit.item,
                index=index,
                repeat=unit.repeat,
                retry=retry,
                warmup=unit.warmup,
                round=unit.round,
                server_last=server_last,
                ahead=ahead,
            )
            return attempt

        def record(a: Attempt) -> None:
            attempts.append(a)
            self._record(a)
            if a.status == "budget_declined":
                self._say(
                    f"{unit.item.name}: retry declined ({a.error.message if a.error else ''})"
                )
                return
            # In a comparison every line says which side and round it is about.
            side = f"{unit.side} r{unit.round} " if len(self.executor.sides) > 1 else ""
            self._say(
                f"{side}{unit.item.name} #{a.index}{' warmup' if a.warmup else ''}"
                f"{f' retry {a.retry}' if a.retry else ''}: {a.status} ({a.duration_s:.2f} s)"
            )

        return with_retries(
            once,
            policy=self._policy(unit.item),
            budget=self.budget,
            case_attempts=attempts,
            all_attempts=self.all_attempts,
            record=record,
            stop=lambda: self.stop_requested,
        )

    def _server_last(self, unit: Unit) -> bool:
        """Whether ``unit`` is the last planned run of the last case of this run's plan that
        uses its case's named server, after which the worker stops that server (a retry of
        it starts and stops it again). Unknown plans (pytest, comparisons) keep it to the
        worker's exit."""
        server = unit.item.case.server
        if server is None or server.name is None or unit.warmup:
            return False
        repeats = self.options.repeats
        if repeats is None:
            repeats = unit.item.case.repeats
        last_item = self.last_server_user.get(server.name)
        return last_item == unit.item.name and unit.repeat == repeats - 1

    def run_item(self, item: PlanItem) -> CaseResult:
        """Run one case on one platform (warm-ups, measured repeats, retries), then check it."""
        if item.skip_reason is not None:
            return self._keep(skipped(item, item.skip_reason, side=self.side))
        if self.stop_requested and not self.executor.in_flight(self.side, item):
            return self._keep(skipped(item, "not run: run interrupted", side=self.side))
        if self.failed_fast is not None:
            return self._not_run(item)
        schedule = Linear([item], repeats=self.options.repeats, side=self.side)
        runs = schedule.runs_of(item)
        attempts: list[Attempt] = []
        try:
            for k, unit in enumerate(schedule.units(item)):
                then = runs[k + 1] if k + 1 < len(runs) else self._first_of_next(schedule)
                final = self.run_unit(unit, attempts, then)
                schedule.feedback(unit, final)
                if final.status == "skipped":
                    break  # a skipped attempt (a missing requirement) skips the whole case
                if self.stop_requested and not self.executor.in_flight(self.side, item):
                    break  # (a run sent ahead is in flight: it finishes and is recorded)
            prof = self.options.profile
            result = aggregate(
                item,
                attempts,
                planned_runs=len(schedule.runs_of(item)),
                budget={**item.case.budget, **prof.budgets.get(item.case.id, {})},
                interrupted=self.stop_requested,
                repeats=self.options.repeats,
                side=self.side,
                **self.executor.judging(self.side, item),
            )
            if self.options.coverage and result.status != "skipped" and not self.stop_requested:
                result = replace(result, coverage=self.take_coverage(self.side, item))
            return self._keep(result)
        except Exception as exc:  # a bug of the harness: recorded against this item, run goes on
            msg = f"{item.name}: harness error {type(exc).__name__}: {exc}"
            self.harness_errors.append(msg)
            self._say(msg)
            error = ErrorInfo.make("HarnessInternalError", msg, traceback.format_exc())
            return self._keep(
                CaseResult(
                    id=item.case.id,
                    kind=item.case.kind,
                    platform=item.platform,
                    status="error",
                    source=item.case.source,
                    reason=f"not judged: {msg} (a harness bug, not a failure of the case)",
                    attempts=tuple(attempts)
                    or (
                        Attempt(
                            item.case.id,
                            item.platform,
                            0,
                            "error",
                            item.case.seed,
                            error=error,
                            side=self.side,
                        ),
                    ),
                    seed=item.case.seed,
                    side=self.side,
                )
            )

    def _first_of_next(self, schedule: Linear) -> Unit | None:
        """The first run of the plan's next case, when it surely runs after this one: it is
        not skipped, and neither --fail-fast nor a coverage attempt nor a stop can come
        between (:mod:`.inflight`)."""
        nxt = self._next_item
        if nxt is None or self.options.fail_fast or self.options.coverage or self.stop_requested:
            return None
        runs = schedule.runs_of(nxt)
        return runs[0] if runs else None

    def take_coverage(self, side: Side, item: PlanItem) -> CoverageRecord:
        """One coverage attempt of ``item`` on ``side`` (:func:`.coverage.coverage_attempt`)."""
        # a run measures its code roots, not the folder it runs in; a comparison its sides'
        roots = self.options.code_roots if len(self.executor.sides) == 1 else ()
        return coverage_attempt(
            self.executor, side, item, roots=roots, profile=self.options.profile, say=self._say
        )

    def _keep(self, result: CaseResult) -> CaseResult:
        self.results.append(result)
        if self.options.fail_fast and self.failed_fast is None and result.status in FAILING:
            self.failed_fast = result.name
            self._say(f"--fail-fast: {result.name} {result.status}; not starting further cases")
        return result

    def _not_run(self, item: PlanItem) -> CaseResult:
        """A case --fail-fast did not start: recorded as missing (no result in the report);
        the skipped result returned is for callers that need one per item (the pytest plugin)."""
        shard = self.options.shard
        where = f"shard {shard.label} " if shard is not None else ""
        reason = f"not run: {where}stopped after {self.failed_fast} failed (--fail-fast)"
        self.missing.append(
            MissingCase(
                id=item.case.id,
                kind=item.case.kind,
                platform=item.platform,
                reason=reason,
                cause="fail_fast",
                shard=shard.index if shard is not None else None,
                source=item.case.source,
            )
        )
        return skipped(item, reason, side=self.side)

    # -- the run ---------------------------------------------------------------------------------

    def run_plan(self, items: Sequence[PlanItem]) -> list[CaseResult]:
        out = []
        # The last case (in run order) that uses each named server: the worker stops that
        # server after it (harness.worker.server_pool).
        self.last_server_user = {
            i.case.server.name: i.name
            for i in items
            if i.skip_reason is None and i.case.server is not None and i.case.server.name
        }
        self.executor.check_devices(i.platform for i in items if i.skip_reason is None)
        try:
            for i, item in enumerate(items, 1):
                if self.options.item_progress is not None and self.failed_fast is None:
                    self.options.item_progress(i, len(items), item.name)
                after = items[i] if i < len(items) else None
                self._next_item = after if after is not None and after.skip_reason is None else None
                out.append(self.run_item(item))
            self._next_item = None
        except KeyboardInterrupt:
            # A second Ctrl-C: abort the attempt in flight, keep everything already recorded.
            self.interrupted = True
            self.stop_requested = True
            self.executor.close()
            done = {(r.id, r.platform) for r in self.results}
            done |= {(m.id, m.platform) for m in self.missing}
            by_item: dict[tuple[str, str], list[Attempt]] = {}
            for a in self.all_attempts:
                by_item.setdefault((a.case_id, a.platform), []).append(a)
            for item in items:
                key = (item.case.id, item.platform)
                if key not in done:
                    out.append(
                        self._keep(
                            skipped(
                                item,
                                "not finished: run interrupted"
                                if key in by_item
                                else "not run: run interrupted",
                                by_item.get(key, ()),
                                side=self.side,
                            )
                        )
                    )
        return out

    def request_stop(self) -> None:
        """Stop starting work (SIGINT/SIGTERM); the attempt in flight finishes."""
        self.stop_requested = True
        self.interrupted = True

    def finish(self, load_errors: Sequence[CaseFileError] = ()) -> RunReport:
        """Close workers and the journal; the report of everything that happened."""
        self.executor.close()
        self.journal.close()
        collected = self.executor.env.get(self.side)
        env = (
            {**collected, "code_roots": list(self.executor.sides[self.side].code_roots)}
            if collected
            else {"error": "no worker started; environment not collected"}
        )
        return RunReport(
            run_id=self.run_id,
            started_at=self.started_at,
            finished_at=_now(),
            argv=self.options.argv,
            runner=self.options.profile.name,
            env=env,
            cases=tuple(self.results),
            interrupted=self.interrupted,
            budget_s=self.budget.total_s,
            load_errors=tuple(LoadError(e.path, str(e)) for e in load_errors),
            infra_errors=tuple(self.infra_errors),
            shard=self.options.shard,
            missing=tuple(self.missing),
            selection=self.options.selection,
        )


__all__ = ["RunOptions", "Runner", "check_run_id", "new_run_id"]
