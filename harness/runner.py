"""The batched scenario runner: a plan in, attempts streamed to disk, a RunReport out.

The manager plans and aggregates; workers execute. Every finished attempt is appended to
``attempts.jsonl`` and flushed before anything else happens, so a crash of the manager itself
still leaves a record of all finished work; ``finish()`` always writes a valid ``report.json``.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any

from harness import report_io
from harness.cases import Case, case_to_json
from harness.checks import evaluate_case_checks
from harness.errors import CaseFileError, WorkerError
from harness.execute import make_error
from harness.model import FAILING, Attempt, CaseResult, ErrorInfo, RunReport, Status, json_safe
from harness.plan import PlanItem
from harness.pool import WorkerCrashed, WorkerHandle, WorkerPool, WorkerSpec, WorkerTimeout
from harness.profile import Profile, RetryPolicy
from harness.retry import Budget, should_retry

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


def new_run_id() -> str:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{uuid.uuid4().hex[:6]}"


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat()


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_")


class Runner:
    """Runs plan items through workers; one instance per run."""

    def __init__(self, options: RunOptions) -> None:
        self.options = options
        self.run_id = options.run_id or new_run_id()
        self.run_dir = options.out_root / self.run_id
        self.run_dir.mkdir(parents=True, exist_ok=False)
        self.started_at = _now()
        self.pool = WorkerPool(self.run_dir / "workers")
        budget = (
            options.budget_s if options.budget_s is not None else (options.profile.time_budget_s)
        )
        self.budget = Budget(budget)
        self._jsonl: IO[str] = open(self.run_dir / "attempts.jsonl", "a", encoding="utf-8")  # noqa: SIM115
        self.results: list[CaseResult] = []
        self.all_attempts: list[Attempt] = []
        self.env: dict[str, Any] = {}
        self.stop_requested = False
        self.interrupted = False
        self.infra_errors: list[str] = []
        self.env_seconds = 0.0
        # platform -> None when really present, else why it is simulated
        self.simulated: dict[str, str | None] = {}

    # -- plumbing ----------------------------------------------------------------------------

    def _say(self, line: str) -> None:
        if self.options.progress is not None:
            self.options.progress(line)

    def _spec(self, platform: str) -> WorkerSpec:
        kw: dict[str, Any] = {}
        if self.options.preimport is not None:
            kw["preimport"] = self.options.preimport
        threads = self.options.profile.threads
        if threads is not None:
            n = str(threads)
            kw["extra_env"] = (
                ("OMP_NUM_THREADS", n),
                ("MKL_NUM_THREADS", n),
                ("HARNESS_THREADS", n),
            )
        return WorkerSpec(
            platform=platform, code_roots=self.options.code_roots, cwd=self.options.cwd, **kw
        )

    def _chain(self, platform: str) -> list[str]:
        """Where thresholds and references are looked up: runner class (when this run's
        runner is of that platform), then the platform, then ``any``."""
        from harness.references import platform_chain

        prof = self.options.profile
        return platform_chain(platform, prof.name if prof.platform == platform else None)

    def _record(self, attempt: Attempt) -> None:
        """Append one finished attempt to the write-ahead log, and flush it."""
        self._jsonl.write(
            json.dumps(json_safe(attempt.to_json()), allow_nan=False, default=str) + "\n"
        )
        self._jsonl.flush()
        self.all_attempts.append(attempt)

    def _check_platform(self, platform: str, handle: WorkerHandle) -> None:
        if platform in self.simulated:
            return
        try:
            reply = handle.request({"op": "platform", "platform": platform}, timeout=60)
            ok, detail = bool(reply.get("available")), str(reply.get("detail", ""))
        except (WorkerTimeout, WorkerCrashed) as exc:
            ok, detail = False, f"platform probe failed: {exc}"
        self.simulated[platform] = (
            None
            if ok
            else (
                f"simulated: {platform} is not available here ({detail}); the case ran on this "
                "machine's CPU with the platform's code paths selected"
            )
        )
        if not ok:
            self._say(f"platform {platform}: {self.simulated[platform]}")

    def _collect_env(self, handle: WorkerHandle) -> None:
        if self.env:
            return
        root = self.options.code_roots[0] if self.options.code_roots else self.options.cwd
        t0 = time.perf_counter()
        try:
            reply = handle.request({"op": "env", "code_root": root}, timeout=120)
            self.env = dict(reply.get("env") or {"error": reply.get("message", "no env")})
            self.env["worker_threads"] = self.options.profile.threads
        except (WorkerTimeout, WorkerCrashed) as exc:
            self.env = {"error": f"environment probe failed: {exc}"}
        self.env_seconds = time.perf_counter() - t0

    # -- one attempt -------------------------------------------------------------------------

    def _attempt(
        self, item: PlanItem, index: int, repeat: int, retry: int, warmup: bool
    ) -> Attempt:
        case = item.case
        out_dir = self.run_dir / "outputs" / _slug(item.name) / f"a{index}"
        job = {
            "seed": case.seed,
            "platform": item.platform,
            "platform_chain": self._chain(item.platform),
            "index": index,
            "repeat": repeat,
            "retry": retry,
            "warmup": warmup,
            "output_dir": str(out_dir),
            "references_root": self.options.references_root,
        }
        base = Attempt(
            case_id=case.id,
            platform=item.platform,
            index=index,
            status="error",
            seed=case.seed,
            warmup=warmup,
            retry=retry,
            repeat=repeat,
            started_at=_now(),
            fresh_process=case.fresh_process,
        )
        spec = self._spec(item.platform)
        t0 = time.perf_counter()
        handle: WorkerHandle | None = None
        try:
            handle = self.pool.fresh(spec) if case.fresh_process else self.pool.get(spec)
            self._collect_env(handle)
            self._check_platform(item.platform, handle)
            t0 = time.perf_counter()
            reply = handle.request(
                {"op": "attempt", "case": case_to_json(case), "job": job}, timeout=case.timeout_s
            )
        except WorkerTimeout as exc:
            self._drop(spec, handle, case)
            return replace(
                base,
                status="timeout",
                duration_s=time.perf_counter() - t0,
                worker_pid=handle.pid if handle else None,
                error=ErrorInfo(
                    "Timeout",
                    f"attempt exceeded timeout_s = "
                    f"{case.timeout_s:g} s; worker stacks captured, "
                    "worker killed",
                    "Timeout",
                    exc.stacks,
                ),
            )
        except WorkerCrashed as exc:
            self._drop(spec, handle, case)
            return replace(
                base,
                status="crashed",
                duration_s=time.perf_counter() - t0,
                worker_pid=handle.pid if handle else None,
                error=ErrorInfo("WorkerCrashed", exc.how, f"WorkerCrashed:{exc.how}", exc.stacks),
            )
        except WorkerError as exc:
            self.infra_errors.append(str(exc))
            return replace(base, status="error", error=make_error("WorkerError", str(exc)))
        if case.fresh_process and handle is not None:
            handle.close()
        if reply.get("op") != "result":
            msg = str(reply.get("message", reply))
            self.infra_errors.append(msg)
            return replace(
                base,
                status="error",
                duration_s=time.perf_counter() - t0,
                error=ErrorInfo(
                    "InfrastructureError",
                    msg,
                    "InfrastructureError",
                    str(reply.get("traceback", "")),
                ),
            )
        attempt = Attempt.from_json(reply["attempt"])
        outputs = {
            name: {**info, "path": os.path.relpath(info["path"], self.run_dir)}
            if info.get("path")
            else dict(info)
            for name, info in attempt.outputs.items()
        }
        metrics = {c.name: c.value for c in attempt.checks if c.value is not None}
        return replace(attempt, outputs=outputs, metrics={**attempt.metrics, **metrics})

    def _drop(self, spec: WorkerSpec, handle: WorkerHandle | None, case: Case) -> None:
        if handle is None:
            return
        if case.fresh_process:
            handle.kill()
        else:
            self.pool.discard(spec)

    # -- one case ----------------------------------------------------------------------------

    def run_item(self, item: PlanItem) -> CaseResult:
        """Run one case on one platform: warm-ups, measured repeats, retries; then its checks."""
        case = item.case
        if item.skip_reason is not None:
            return self._finish_case(item, "skipped", (), reason=item.skip_reason)
        if self.stop_requested:
            return self._finish_case(item, "skipped", (), reason="not run: run interrupted")
        prof = self.options.profile
        retries = (
            self.options.retries
            if self.options.retries is not None
            else (case.retries if case.retries is not None else prof.retry.retries)
        )
        policy = RetryPolicy(retries, prof.retry.retry_on, prof.retry.patterns)
        repeats = self.options.repeats if self.options.repeats is not None else case.repeats
        attempts: list[Attempt] = []
        runs = [(True, w) for w in range(case.warmup)] + [(False, r) for r in range(repeats)]
        for warmup, repeat in runs:
            final = self._run_with_retries(item, attempts, repeat, warmup, policy)
            if final.status != "passed" or self.stop_requested:
                break
        measured_finals = _final_attempts(attempts)
        if any(a.status == "budget_declined" for a in attempts):
            status: Status = _worst(measured_finals)
        elif all(a.status == "passed" for a in measured_finals) and len(measured_finals) == len(
            runs
        ):
            failed_before = any(a.status in FAILING for a in attempts)
            status = "flaky" if failed_before else "passed"
        elif self.stop_requested and all(a.status == "passed" for a in measured_finals):
            return self._finish_case(
                item, "skipped", tuple(attempts), reason="not finished: run interrupted"
            )
        else:
            status = _worst(measured_finals)
        budget = {**case.budget, **prof.budgets.get(case.id, {})}
        case_checks = evaluate_case_checks(case, attempts, budget)
        last_checks = next(
            (
                a.checks
                for a in reversed(attempts)
                if not a.warmup and a.status != "budget_declined"
            ),
            (),
        )
        checks = (*last_checks, *case_checks)
        if status in ("passed", "flaky") and any(c.blocking for c in case_checks):
            status = "failed"
        return self._finish_case(item, status, tuple(attempts), checks=checks)

    def _run_with_retries(
        self,
        item: PlanItem,
        attempts: list[Attempt],
        repeat: int,
        warmup: bool,
        policy: RetryPolicy,
    ) -> Attempt:
        retry = 0
        while True:
            attempt = self._attempt(item, len(attempts), repeat, retry, warmup)
            attempts.append(attempt)
            self._record(attempt)
            self._say(
                f"{item.name} #{attempt.index}{' warmup' if warmup else ''}"
                f"{f' retry {retry}' if retry else ''}: {attempt.status} "
                f"({attempt.duration_s:.2f} s)"
            )
            if attempt.status == "passed" or self.stop_requested:
                return attempt
            cls = should_retry(attempt, policy)
            if cls is None or retry >= policy.retries:
                return attempt
            estimate = Budget.estimate(attempts, self.all_attempts)
            fits, left = self.budget.fits(estimate)
            if not fits:
                declined = Attempt(
                    case_id=item.case.id,
                    platform=item.platform,
                    index=len(attempts),
                    status="budget_declined",
                    seed=item.case.seed,
                    warmup=warmup,
                    retry=retry + 1,
                    repeat=repeat,
                    started_at=_now(),
                    error=ErrorInfo(
                        "BudgetDeclined",
                        f"retry {retry + 1} of a {cls} failure declined: estimated "
                        f"{estimate:.1f} s, {left:.1f} s left of the run's "
                        f"{self.budget.total_s:g} s budget",
                        "BudgetDeclined",
                    ),
                    metrics={
                        "seconds_left": round(left or 0.0, 3),
                        "seconds_estimated": round(estimate, 3),
                    },
                )
                attempts.append(declined)
                self._record(declined)
                self._say(
                    f"{item.name}: retry declined ({estimate:.1f} s needed, {left:.1f} s left)"
                )
                return attempt
            retry += 1

    def _finish_case(
        self,
        item: PlanItem,
        status: Status,
        attempts: tuple[Attempt, ...],
        *,
        reason: str | None = None,
        checks: tuple[Any, ...] = (),
    ) -> CaseResult:
        if reason is None and status not in ("passed", "flaky"):
            err = next((a.error for a in reversed(attempts) if a.error is not None), None)
            reason = (
                f"{err.type}: {err.message.splitlines()[0] if err.message else ''}" if err else None
            )
        elif reason is None and status == "flaky":
            failed = [a for a in attempts if a.status in FAILING]
            first = failed[0].error if failed and failed[0].error else None
            reason = f"passed only after {len(failed)} failed attempt(s)" + (
                f"; first: {first.type}: {first.message.splitlines()[0] if first.message else ''}"
                if first
                else ""
            )
        why_simulated = self.simulated.get(item.platform)
        if why_simulated and attempts:
            reason = why_simulated if reason is None else f"{reason}; {why_simulated}"
        result = CaseResult(
            id=item.case.id,
            kind=item.case.kind,
            platform=item.platform,
            status=status,
            simulated=bool(why_simulated) and bool(attempts),
            source=item.case.source,
            reason=reason,
            checks=checks,
            attempts=attempts,
            seed=item.case.seed,
            repeats=self.options.repeats or item.case.repeats,
            reference=item.case.reference or item.case.id,
        )
        self.results.append(result)
        return result

    # -- the run -----------------------------------------------------------------------------

    def run_plan(self, items: Sequence[PlanItem]) -> list[CaseResult]:
        out = []
        try:
            for i, item in enumerate(items, 1):
                if self.options.item_progress is not None:
                    self.options.item_progress(i, len(items), item.name)
                out.append(self.run_item(item))
        except KeyboardInterrupt:
            self.interrupted = True
            self.stop_requested = True
            self.pool.close()
            done = {(r.id, r.platform) for r in self.results}
            for item in items:
                if (item.case.id, item.platform) not in done:
                    out.append(
                        self._finish_case(item, "skipped", (), reason="not run: run interrupted")
                    )
        return out

    def request_stop(self) -> None:
        """Stop starting work (SIGINT/SIGTERM); the attempt in flight finishes."""
        self.stop_requested = True
        self.interrupted = True

    def finish(self, load_errors: Sequence[CaseFileError] = ()) -> RunReport:
        """Close workers and write report.json, junit.xml and ``latest``."""
        self.pool.close()
        self._jsonl.close()
        input_cases = tuple(
            CaseResult(
                id=err.path,
                kind="casefile",
                platform="-",
                status="error",
                source=err.path,
                reason=str(err),
            )
            for err in load_errors
        )
        report = RunReport(
            run_id=self.run_id,
            started_at=self.started_at,
            finished_at=_now(),
            argv=self.options.argv,
            runner=self.options.profile.name,
            env=self.env or {"error": "no worker started; environment not collected"},
            cases=(*input_cases, *self.results),
            interrupted=self.interrupted,
            budget_s=self.budget.total_s,
        )
        report_io.write_run(report, self.run_dir, latest=self.options.write_latest)
        return report


def _final_attempts(attempts: Sequence[Attempt]) -> list[Attempt]:
    """The last real attempt of each warm-up/measured run (retries replace their predecessor)."""
    finals: dict[tuple[bool, int], Attempt] = {}
    for a in attempts:
        if a.status == "budget_declined":
            continue
        finals[(a.warmup, a.repeat)] = a
    return list(finals.values())


_SEVERITY: tuple[Status, ...] = ("crashed", "timeout", "error", "failed")


def _worst(attempts: Sequence[Attempt]) -> Status:
    statuses = {a.status for a in attempts}
    for s in _SEVERITY:
        if s in statuses:
            return s
    return "error"


def exit_code(report: RunReport, infra_errors: Sequence[str] = ()) -> int:
    """DESIGN's exit codes: 2 input error, 3 infrastructure, 1 failure, 7 only flaky, 0 clean."""
    statuses = {c.status for c in report.cases}
    if any(c.kind == "casefile" for c in report.cases):
        return 2
    if infra_errors:
        return 3
    if statuses & {"failed", "error", "timeout", "crashed", "budget_declined"}:
        return 1
    if "flaky" in statuses:
        return 7
    return 0
