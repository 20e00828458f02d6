"""The attempt: one attempt of one case for one side, through that side's worker.

The executor owns the manager side of the process boundary for an attempt: it takes the
side's :class:`~harness.execution.resolution.ResolvedPlatform` (resolved once per side and
platform, before the first attempt: identity, devices, policy, reference chain, quality
thresholds) and the case as prepared against it, sends the job to the worker the record names
(:mod:`.workers`), collects the environment probe of each side (once, after the side's first
attempt, so a fresh interpreter starts bare), and turns a hang, a crash or a protocol violation
into the record of the attempt it happened in. It never calls into ``harness.platforms``.
"""

from __future__ import annotations

import datetime as dt
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness.cases import PlanItem
from harness.errors import WorkerError
from harness.execution.devices import DeviceAssignment
from harness.execution.inflight import Ahead, InFlight, Job, Pipeline
from harness.execution.pool import (
    ProtocolViolation,
    WorkerCrashed,
    WorkerHandle,
    WorkerPool,
    WorkerSpec,
    WorkerTimeout,
)
from harness.execution.resolution import ResolvedPlatform, Resolver
from harness.execution.retry import OOM_EVIDENCE, oom_kill_count
from harness.execution.workers import SideSpec, case_worker
from harness.fsio import slug
from harness.model import Attempt, ErrorInfo, Side
from harness.platforms.policy import Policy
from harness.platforms.profile import Profile
from harness.worker import protocol as p

__all__ = ["Executor"]


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat()


TORCH_FROM_A_PROBE = (
    "the %s probe imported torch (to ask a device runtime's build for its devices), which the "
    "runner profile's preimport leaves out"
)


class Executor:
    """Runs attempts for (side, plan item); one instance per run or comparison."""

    def __init__(
        self,
        *,
        run_dir: Path,
        profile: Profile,
        sides: Mapping[Side, SideSpec],
        references_root: str | None = None,
        preimport: tuple[str, ...] | None = None,
        say: Callable[[str], None] | None = None,
        explain: bool = False,
    ) -> None:
        self.run_dir = run_dir
        # Every attempt compared with its layered reference, not only quality failures.
        self.explain = explain
        self.profile = profile
        self.sides = dict(sides)
        self.references_root = references_root
        # the caller's, else the runner profile's, else the pool's default (numpy and torch)
        if preimport is None:
            preimport = profile.preimport
        self.preimport = preimport
        self.say = say or (lambda _line: None)
        self.pool = WorkerPool(run_dir / "workers")
        self.env: dict[Side, dict[str, Any]] = {}
        self.env_seconds = 0.0
        # Faults of the harness, one line each, per side: a paired run's report for one side
        # names only the faults of its own attempts.
        self.side_infra_errors: dict[Side, list[str]] = {}
        self.devices = DeviceAssignment(profile)
        self.resolver = Resolver(
            profile=profile,
            sides=self.sides,
            devices=self.devices,
            probe=self._probe_platform,
            preimport=preimport,
            say=self._tell,
        )
        self._slugs: dict[str, str] = {}  # item name -> its outputs folder
        self._pinned = -1  # how many worker groups the environment record's pins were read for
        self.pipeline = Pipeline(self._prepare_ahead)  # the attempt sent before its turn

    def _tell(self, line: str) -> None:
        self.say(line)

    # -- platform resolution (once per side and platform: :mod:`.resolution`) ------------------

    def policy(self, platform: str) -> Policy:
        """The platform policy of ``platform`` on this run's runner class (resolved once)."""
        return self.resolver.policy(platform)

    def resolve(self, side: Side, platform: str, *, fresh: bool = False) -> ResolvedPlatform:
        """What ``side`` runs as on ``platform`` (resolved before its first attempt)."""
        return self.resolver.resolve(side, platform, fresh=fresh)

    def judging(self, side: Side, item: PlanItem) -> dict[str, Any]:
        """What :func:`~harness.execution.aggregate.aggregate` judges ``item`` of ``side`` by:
        why its platform is simulated, its identity, its policy and the policy's record
        (looked up, never re-applied)."""
        return self.resolver.judging(side, item)

    def check_devices(self, platforms: Iterable[str]) -> None:
        """Check the profile's ``device_count`` against this machine before any work
        (:meth:`DeviceAssignment.check_machine`, in an interpreter of the first side)."""
        side = next(iter(self.sides.values()))
        self.devices.check_machine(
            platforms, code_roots=side.code_roots, python=side.python, say=self.say
        )

    def _probe_platform(
        self, spec: WorkerSpec, platform: str, arch: str | None
    ) -> tuple[bool, str, Mapping[str, Any] | None]:
        """Ask the persistent worker of ``spec`` what ``platform`` is there."""
        try:
            handle = self.pool.get(spec)
            reply = handle.request(
                p.PlatformRequest(handle.next_nonce(), platform, arch=arch), timeout=60
            )
            ok = isinstance(reply, p.PlatformReply) and reply.available
            detail = getattr(reply, "detail", getattr(reply, "message", ""))
            if getattr(reply, "replace_worker", False):
                self._replace(spec, handle, TORCH_FROM_A_PROBE % "platform")
            return ok, detail, getattr(reply, "identity", None)
        except (WorkerError, WorkerTimeout, WorkerCrashed, ProtocolViolation) as exc:
            return False, f"platform probe failed: {exc}", None

    def _replace(self, spec: WorkerSpec, handle: WorkerHandle, why: str, case: str = "") -> None:
        """The worker was changed in a way that cannot be undone (by ``case``, or by a probe
        that imported torch, which its runner profile leaves out): the next case gets a new
        one."""
        self.pool.discard(spec, graceful=True)
        self.say(
            f"{case + ': ' if case else ''}worker {handle.pid} replaced before the next case: {why}"
        )

    def _probe_side(self, side: Side, handle: WorkerHandle) -> bool:
        """Environment (once per side); the device pins each time a worker group is added.
        True: the environment probe imported torch into the worker (see :meth:`_replace`)."""
        replace_worker = False
        if side not in self.env:
            s = self.sides[side]
            root = s.code_roots[0] if s.code_roots else s.cwd
            t0 = time.perf_counter()
            try:
                reply = handle.request(p.EnvRequest(handle.next_nonce(), root), timeout=120)
                if isinstance(reply, p.EnvReply):
                    env = dict(reply.env)
                    replace_worker = reply.replace_worker
                else:
                    env = {"error": getattr(reply, "message", repr(reply))}
                env["worker_threads"] = self.profile.threads
            except (WorkerTimeout, WorkerCrashed, ProtocolViolation) as exc:
                env = {"error": f"environment probe failed: {exc}"}
            self.env[side] = env
            self.env_seconds += time.perf_counter() - t0
            self._pinned = -1
        groups = self.devices.groups()
        if groups != self._pinned:
            for name, env in self.env.items():
                if "error" not in env:
                    env["device_assignment"] = dict(self.devices.record(name))
            self._pinned = groups
        return replace_worker

    @property
    def infra_errors(self) -> list[str]:
        """Every side's harness faults, in the order they happened per side."""
        return [e for errors in self.side_infra_errors.values() for e in errors]

    def _infra_error(self, side: Side, line: str) -> None:
        self.side_infra_errors.setdefault(side, []).append(line)

    # -- one attempt ---------------------------------------------------------------------------

    def run_job(
        self,
        side: Side,
        item: PlanItem,
        *,
        index: int,
        repeat: int,
        retry: int,
        warmup: bool,
        round: int = 0,
        coverage: tuple[str, ...] | None = None,
        server_last: bool = False,
        ahead: Ahead | None = None,
    ) -> tuple[Attempt, Mapping[str, Any] | None]:
        """One attempt and, for a coverage attempt (``coverage``: the folders and packages to
        measure), what the worker measured (None when the worker did not answer).

        ``ahead``: the attempt that runs next if this one passes (:mod:`.inflight`); it is
        sent to the same worker as soon as this one's answer is read, so that the worker runs
        it while this side records this one. It is the attempt the next call asks for."""
        flight = self.pipeline.take()
        key = (side, item.name, index, repeat, retry, warmup, round)
        if flight is not None and (flight.key != key or coverage is not None or server_last):
            self._abandon(flight)
            flight = None
        if flight is None:
            job = self._prepare(
                side,
                item,
                index=index,
                repeat=repeat,
                retry=retry,
                warmup=warmup,
                round=round,
                coverage=coverage,
                server_last=server_last,
            )
            if isinstance(job, Attempt):
                return job, None
        else:
            job = flight.job
        return self._run(job, flight, ahead if coverage is None else None)

    def _prepare(
        self,
        side: Side,
        item: PlanItem,
        *,
        index: int,
        repeat: int,
        retry: int,
        warmup: bool,
        round: int,
        coverage: tuple[str, ...] | None,
        server_last: bool,
    ) -> Job | Attempt:
        """The job of one attempt and the worker it goes to (an error attempt when its code
        root is missing)."""
        resolved = self.resolver.resolve(side, item.platform, fresh=item.case.fresh_process)
        case = self.resolver.prepared(resolved, item.case).case
        sub = f"{side}-r{round}-a{index}" if side != "head" or round else f"a{index}"
        if coverage is not None:
            sub = f"{side}-coverage"
        out_dir = self.run_dir / "outputs" / self._slug(item.name) / sub
        job = p.AttemptJob(
            identity=resolved.identity,
            case=case,
            platform=item.platform,
            platform_chain=resolved.reference_chain,
            index=index,
            seed=case.seed,
            repeat=repeat,
            retry=retry,
            warmup=warmup,
            side=side,
            round=round,
            output_dir=str(out_dir),
            references_root=self.references_root,
            server_last=server_last,
            explain=self.explain,
            layer_tolerances=resolved.policy.layer_tolerances(),
            coverage=coverage,
        )
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
            side=side,
            round=round,
        )
        root = self.sides[side].case_root(case)
        if root is not None and not root.is_dir():
            return replace(
                base,
                error=ErrorInfo.make(
                    "CodeRootMissing",
                    f"case '{case.id}' ({case.source}): code_root '{case.code_root}' is not a "
                    f"folder ({root} does not exist in this side's checkout)",
                ),
            )
        spec = case_worker(resolved.worker, self.sides[side], case)
        wide = self.devices.for_ranks(spec.devices, case.rank_count)
        if wide != spec.devices:  # one device per rank: a worker of its own owns them
            spec = replace(spec, devices=wide)
        key = (side, item.name, index, repeat, retry, warmup, round)
        return Job(key, item, case, job, base, spec)

    def _run(
        self, prep: Job, flight: InFlight | None, ahead: Ahead | None
    ) -> tuple[Attempt, Mapping[str, Any] | None]:
        side, item, case, base, spec = prep.key[0], prep.item, prep.case, prep.base, prep.spec
        index, fresh, server_last = prep.job.index, case.fresh_process, prep.job.server_last
        t0 = time.perf_counter()
        oom_before = oom_kill_count() if flight is None else flight.oom_before
        handle: WorkerHandle | None = None if flight is None else flight.handle
        try:
            if flight is None:
                handle = self.pool.fresh(spec) if fresh else self.pool.get(spec)
                t0 = time.perf_counter()
                request = p.AttemptRequest(handle.next_nonce(), prep.job)
                handle.send(request)
                deadline = time.monotonic() + case.timeout_s
            else:
                t0, request, deadline = flight.sent, flight.request, flight.deadline
                base = replace(base, started_at=flight.started_at)  # (prepared before)
                if flight.failed is not None:
                    raise flight.failed
            assert handle is not None
            if ahead is not None:
                self.pipeline.warm(ahead, prep)
            reply = handle.receive(request, deadline, case.timeout_s, case_id=case.id, index=index)
        except WorkerTimeout as exc:
            self._drop(spec, handle, fresh=fresh)
            return replace(
                base,
                status="timeout",
                duration_s=time.perf_counter() - t0,
                worker_pid=handle.pid if handle else None,
                error=ErrorInfo(
                    "Timeout",
                    f"attempt exceeded timeout_s = {case.timeout_s:g} s; worker stacks "
                    f"captured, worker killed; log: {handle.log_path if handle else '-'}",
                    "Timeout",
                    exc.stacks,
                ),
            ), None
        except WorkerCrashed as exc:
            self._drop(spec, handle, fresh=fresh)
            log = f"; log: {handle.log_path}" if handle else ""
            oom_after = oom_kill_count()
            if oom_before is not None and oom_after is not None and oom_after > oom_before:
                log = f" ({OOM_EVIDENCE} from {oom_before} to {oom_after}){log}"
            return replace(
                base,
                status="crashed",
                duration_s=time.perf_counter() - t0,
                worker_pid=handle.pid if handle else None,
                error=ErrorInfo(
                    "WorkerCrashed", exc.how + log, f"WorkerCrashed:{exc.how}", exc.stacks
                ),
            ), None
        except (WorkerError, ProtocolViolation) as exc:
            self._drop(spec, handle, fresh=fresh)
            self._infra_error(side, f"{item.name} attempt {index}: {exc}")
            return replace(
                base,
                duration_s=time.perf_counter() - t0,
                error=ErrorInfo.make("HarnessInternalError", f"{type(exc).__name__}: {exc}"),
            ), None
        duration = time.perf_counter() - t0
        if isinstance(reply, p.AttemptReply):
            probed_torch = self._probe_side(side, handle)
            if case.server is not None and case.server.name is not None and not server_last:
                # it keeps the shared server for later cases: at its exit it stops it
                handle.servers_stop_s = max(handle.servers_stop_s, case.server.stop_timeout_s + 5)
            if fresh:
                handle.close()
            elif reply.replace_worker:  # the case changed its worker (it fails for it)
                what = reply.attempt.get("notes", {}).get("harness.isolation", "")
                self._replace(spec, handle, what, item.name)
            elif probed_torch:
                self._replace(spec, handle, TORCH_FROM_A_PROBE % "environment")
            elif ahead is not None and reply.attempt.get("status") == "passed":
                self.pipeline.send(ahead, prep, handle, live=self.pool.live(spec) is handle)
            return self._localize(Attempt.from_json(reply.attempt)), reply.coverage
        # The worker caught a bug of the harness itself: an infrastructure error of this run,
        # recorded against this attempt, never a failure (or a pass) of the code under test.
        msg = getattr(reply, "message", repr(reply))
        self._infra_error(side, f"{item.name} attempt {index}: {msg}")
        self._drop(spec, handle, fresh=fresh)
        return replace(
            base,
            duration_s=duration,
            error=ErrorInfo(
                "HarnessInternalError", msg, "HarnessInternalError", getattr(reply, "traceback", "")
            ),
        ), None

    # -- the next attempt, sent ahead (:mod:`.inflight`) -----------------------------------------

    def _prepare_ahead(self, ahead: Ahead) -> Job | Attempt:
        return self._prepare(
            ahead.side,
            ahead.item,
            index=ahead.index,
            repeat=ahead.repeat,
            retry=0,
            warmup=ahead.warmup,
            round=ahead.round,
            coverage=None,
            server_last=False,
        )

    @property
    def sent_ahead(self) -> int:
        """How many attempts were sent before their turn."""
        return self.pipeline.sent

    def in_flight(self, side: Side, item: PlanItem) -> bool:
        """Whether an attempt of ``item`` was sent ahead and is running (a stop requested now
        lets it finish and records it, like any attempt in flight)."""
        return self.pipeline.in_flight(side, item.name)

    def _abandon(self, flight: InFlight) -> None:
        """An attempt sent ahead that the run did not ask for next: a bug of the harness. Its
        worker is replaced, so nothing it did reaches the next attempt."""
        self._drop(flight.job.spec, flight.handle, fresh=False)
        self._infra_error(
            flight.key[0],
            f"{flight.job.item.name} attempt {flight.job.job.index}: sent ahead but not asked "
            "for next (a harness bug); its worker was replaced",
        )

    def _slug(self, name: str) -> str:
        found = self._slugs.get(name)
        if found is None:
            found = self._slugs[name] = slug(name)
        return found

    def _localize(self, attempt: Attempt) -> Attempt:
        """Output paths relative to the run folder; check values copied into ``metrics``."""
        if not attempt.outputs and not attempt.checks and not attempt.intermediates.get("path"):
            return attempt  # nothing to change (a trivial case's attempt: no copy made)
        outputs = {
            name: {**info, "path": os.path.relpath(info["path"], self.run_dir)}
            if info.get("path")
            else dict(info)
            for name, info in attempt.outputs.items()
        }
        metrics = {c.name: c.value for c in attempt.checks if c.value is not None}
        layers = dict(attempt.intermediates)
        if layers.get("path"):
            layers["path"] = os.path.relpath(layers["path"], self.run_dir)
        return replace(
            attempt, outputs=outputs, metrics={**attempt.metrics, **metrics}, intermediates=layers
        )

    def _drop(self, spec: WorkerSpec, handle: WorkerHandle | None, *, fresh: bool) -> None:
        if handle is None:
            return
        if fresh:
            handle.kill()
        else:
            self.pool.discard(spec)

    def close(self) -> None:
        self.pipeline.take()  # (a second Ctrl-C: its worker is killed with the others)
        self.pool.close()
