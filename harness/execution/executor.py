"""The executor: one attempt of one case for one side, through that side's worker.

It owns the manager side of the process boundary: which worker serves a side and platform,
the environment probe of each side (collected once, after the side's first attempt, so a fresh
interpreter starts bare), the platform of each side x platform (its policy, resolved by
:mod:`harness.platforms.policy`, and its identity, real or simulated, asked once of a
persistent worker before the first attempt and handed to every attempt, hence to the target
through ``probe.platform_info()``), and the translation of a hang, a crash or a protocol
violation into the record of the attempt it happened in.
"""

from __future__ import annotations

import datetime as dt
import os
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness.cases import PlanItem
from harness.errors import WorkerError
from harness.execution.devices import DeviceAssignment
from harness.execution.pool import (
    ProtocolViolation,
    WorkerCrashed,
    WorkerHandle,
    WorkerPool,
    WorkerSpec,
    WorkerTimeout,
)
from harness.execution.retry import OOM_EVIDENCE, oom_kill_count
from harness.fsio import slug
from harness.model import Attempt, Case, ErrorInfo, Side
from harness.platforms import check, resolve_identity
from harness.platforms.base import Identity
from harness.platforms.policy import Policy, apply_quality, threshold_chain
from harness.platforms.policy import resolve as resolve_policy
from harness.platforms.profile import Profile
from harness.worker import protocol as p


@dataclass(frozen=True)
class SideSpec:
    """How one side's code is run: its import roots, interpreter and working directory."""

    name: Side = "head"
    code_roots: tuple[str, ...] = ()
    python: str = sys.executable
    cwd: str | None = None
    rev: str | None = None  # the revision this side's code roots hold, when known
    repo: str | None = None  # the checkout a case's `code_root` is relative to (default: cwd)

    def case_root(self, case: Case) -> Path | None:
        """The case's own code root, resolved in this side's checkout (None when it has none)."""
        if case.code_root is None:
            return None
        return (Path(self.repo or self.cwd or ".") / case.code_root).resolve()


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat()


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
    ) -> None:
        self.run_dir = run_dir
        self.profile = profile
        self.sides = dict(sides)
        self.references_root = references_root
        self.preimport = preimport
        self.say = say or (lambda _line: None)
        self.pool = WorkerPool(run_dir / "workers")
        self.env: dict[str, dict[str, Any]] = {}
        self.env_seconds = 0.0
        # (side, platform) -> None when the platform is really there, else why it is simulated
        self.simulated: dict[tuple[str, str], str | None] = {}
        # (side, platform) -> the identity its attempts run as (Identity JSON), None if unknown
        self.identities: dict[tuple[str, str], Mapping[str, Any] | None] = {}
        self.policies: dict[str, Policy] = {}
        self.infra_errors: list[str] = []
        self.devices = DeviceAssignment(profile)
        # (side, platform, case id) -> the policy record prepare() made for the case's result
        self._records: dict[tuple[str, str, str], dict[str, dict[str, Any]]] = {}

    # -- workers -------------------------------------------------------------------------------

    def spec(self, side: Side, platform: str, case: Case | None = None) -> WorkerSpec:
        """How the worker for this side and platform starts; a case with a ``code_root`` gets
        a worker whose import path has that folder first (and so a worker of its own)."""
        s = self.sides[side]
        root = s.case_root(case) if case is not None else None
        code_roots = s.code_roots if root is None else (str(root), *s.code_roots)
        kw: dict[str, Any] = {}
        if self.preimport is not None:
            kw["preimport"] = self.preimport
        threads = self.profile.threads
        if threads is not None:
            n = str(threads)
            kw["extra_env"] = (
                ("OMP_NUM_THREADS", n),
                ("MKL_NUM_THREADS", n),
                ("HARNESS_THREADS", n),
            )
        return WorkerSpec(
            platform=platform,
            code_roots=code_roots,
            python=s.python,
            cwd=s.cwd,
            side=side,
            devices=self.devices.devices_of(side, platform),
            start_timeout_s=self.policy(platform).worker_start_s,
            **kw,
        )

    def check_devices(self, platforms: Iterable[str]) -> None:
        """Check the profile's ``device_count`` against this machine before any work
        (:meth:`DeviceAssignment.check_machine`, in an interpreter of the first side)."""
        side = next(iter(self.sides.values()))
        self.devices.check_machine(
            platforms, code_roots=side.code_roots, python=side.python, say=self.say
        )

    def policy(self, platform: str) -> Policy:
        """The platform policy of ``platform`` on this run's runner class (resolved once)."""
        if platform not in self.policies:
            self.policies[platform] = resolve_policy(platform, self.profile)
        return self.policies[platform]

    def chain(self, platform: str) -> tuple[str, ...]:
        """Where references are looked up: runner class (when this run's runner is of that
        platform), then the platform, then the policy's ``references.fallback``."""
        prof = self.profile
        runner = prof.name if prof.platform == platform else None
        return self.policy(platform).reference_chain(runner)

    def prepare(self, side: Side, item: PlanItem) -> tuple[Case, dict[str, dict[str, Any]]]:
        """The case as this platform's policy runs it (quality thresholds filled in, timeout
        scaled) and the policy record of its result: setting -> {value, rule, source}."""
        pol = self.policy(item.platform)
        identity = self.identities.get((side, item.platform))
        ident = Identity.from_json(identity) if identity is not None else None
        case, quality = apply_quality(
            item.case, pol, threshold_chain(self.chain(item.platform), ident)
        )
        case = replace(case, timeout_s=case.timeout_s * pol.attempt_scale)
        record = {**pol.to_json(), **{k: d.to_json() for k, d in sorted(quality.items())}}
        self._records[(side, item.platform, item.case.id)] = record
        return case, record

    def judging(self, side: Side, item: PlanItem) -> dict[str, Any]:
        """What :func:`~harness.execution.aggregate.aggregate` judges ``item`` of ``side`` by:
        why its platform is simulated, its identity, its policy and the policy's record."""
        key = (side, item.platform)
        return {
            "simulated": self.simulated.get(key),
            "identity": self.identities.get(key),
            "policy": self.policy(item.platform),
            "policy_record": self._records.get((side, item.platform, item.case.id))
            or self.prepare(side, item)[1],
        }

    def _platform(self, side: Side, platform: str, *, fresh: bool = False) -> None:
        """The identity ``platform`` runs as on this side, asked once of a persistent worker
        (never of a fresh one: a cold-import case must find its interpreter bare). For a
        fresh-process case on the manager's own interpreter it is resolved here instead, so
        such a case starts no persistent worker it does not use."""
        key = (side, platform)
        if key in self.identities:
            return
        prof = self.profile
        arch = prof.arch if prof.platform == platform else None
        identity: Mapping[str, Any] | None = None
        if fresh and self.sides[side].python == sys.executable:
            ok, detail = check(platform)
            self._identified(key, ok, detail, resolve_identity(platform, arch).to_json())
            return
        try:
            handle = self.pool.get(self.spec(side, platform))
            reply = handle.request(
                p.PlatformRequest(handle.next_nonce(), platform, arch=arch), timeout=60
            )
            ok = isinstance(reply, p.PlatformReply) and reply.available
            detail = getattr(reply, "detail", getattr(reply, "message", ""))
            identity = getattr(reply, "identity", None)
        except (WorkerError, WorkerTimeout, WorkerCrashed, ProtocolViolation) as exc:
            ok, detail = False, f"platform probe failed: {exc}"
        self._identified(key, ok, detail, identity)

    def _identified(
        self,
        key: tuple[Side, str],
        ok: bool,
        detail: str,
        identity: Mapping[str, Any] | None,
    ) -> None:
        platform = key[1]
        self.identities[key] = identity
        # Where the work then ran is told by the devices the attempts recorded (aggregate).
        reason = f"simulated: {platform} is not available here ({detail})"
        self.simulated[key] = None if ok else reason
        if not ok:
            shown = f" as {identity.get('arch')}" if identity and identity.get("arch") else ""
            self.say(
                f"platform {platform}: {reason}; runs on the CPU presenting {platform}{shown}; "
                "results labelled simulated"
            )
        line = self.devices.probed(platform, ok, detail)
        if line is not None:
            self.say(line)

    def _probe_side(self, side: Side, platform: str, handle: WorkerHandle) -> None:
        """Environment (once per side)."""
        if side not in self.env:
            s = self.sides[side]
            root = s.code_roots[0] if s.code_roots else s.cwd
            t0 = time.perf_counter()
            try:
                reply = handle.request(p.EnvRequest(handle.next_nonce(), root), timeout=120)
                if isinstance(reply, p.EnvReply):
                    env = dict(reply.env)
                else:
                    env = {"error": getattr(reply, "message", repr(reply))}
                env["worker_threads"] = self.profile.threads
            except (WorkerTimeout, WorkerCrashed, ProtocolViolation) as exc:
                env = {"error": f"environment probe failed: {exc}"}
            self.env[side] = env
            self.env_seconds += time.perf_counter() - t0
        if side in self.env and "error" not in self.env[side]:
            self.env[side]["device_assignment"] = dict(self.devices.record(side))

    # -- one attempt ---------------------------------------------------------------------------

    def attempt(
        self,
        side: Side,
        item: PlanItem,
        *,
        index: int,
        repeat: int,
        retry: int,
        warmup: bool,
        round: int = 0,
    ) -> Attempt:
        """One attempt, recorded whatever happens to the worker."""
        self._platform(side, item.platform, fresh=item.case.fresh_process)
        case, _ = self.prepare(side, item)
        sub = f"{side}-r{round}-a{index}" if side != "head" or round else f"a{index}"
        out_dir = self.run_dir / "outputs" / slug(item.name) / sub
        job = p.AttemptJob(
            identity=self.identities.get((side, item.platform)),
            case=case,
            platform=item.platform,
            platform_chain=self.chain(item.platform),
            index=index,
            seed=case.seed,
            repeat=repeat,
            retry=retry,
            warmup=warmup,
            side=side,
            round=round,
            output_dir=str(out_dir),
            references_root=self.references_root,
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
        spec = self.spec(side, item.platform, case)
        t0 = time.perf_counter()
        oom_before = oom_kill_count()
        handle: WorkerHandle | None = None
        try:
            handle = self.pool.fresh(spec) if case.fresh_process else self.pool.get(spec)
            t0 = time.perf_counter()
            reply = handle.request(
                p.AttemptRequest(handle.next_nonce(), job),
                timeout=case.timeout_s,
                case_id=case.id,
                index=index,
            )
        except WorkerTimeout as exc:
            self._drop(spec, handle, fresh=case.fresh_process)
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
            )
        except WorkerCrashed as exc:
            self._drop(spec, handle, fresh=case.fresh_process)
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
            )
        except (WorkerError, ProtocolViolation) as exc:
            self._drop(spec, handle, fresh=case.fresh_process)
            self.infra_errors.append(f"{item.name} attempt {index}: {exc}")
            return replace(
                base,
                duration_s=time.perf_counter() - t0,
                error=ErrorInfo.make("HarnessInternalError", f"{type(exc).__name__}: {exc}"),
            )
        duration = time.perf_counter() - t0
        if isinstance(reply, p.AttemptReply):
            self._probe_side(side, item.platform, handle)
            if case.fresh_process:
                handle.close()
            elif reply.replace_worker:
                # The case changed its worker in a way that cannot be undone (it fails for it).
                self.pool.discard(spec)
                what = reply.attempt.get("notes", {}).get("harness.isolation", "")
                self.say(f"{item.name}: worker {handle.pid} replaced before the next case: {what}")
            return self._localize(Attempt.from_json(reply.attempt))
        # The worker caught a bug of the harness itself: an infrastructure error of this run,
        # recorded against this attempt, never a failure (or a pass) of the code under test.
        msg = getattr(reply, "message", repr(reply))
        self.infra_errors.append(f"{item.name} attempt {index}: {msg}")
        self._drop(spec, handle, fresh=case.fresh_process)
        return replace(
            base,
            duration_s=duration,
            error=ErrorInfo(
                "HarnessInternalError", msg, "HarnessInternalError", getattr(reply, "traceback", "")
            ),
        )

    def _localize(self, attempt: Attempt) -> Attempt:
        """Output paths relative to the run folder; check values copied into ``metrics``."""
        outputs = {
            name: {**info, "path": os.path.relpath(info["path"], self.run_dir)}
            if info.get("path")
            else dict(info)
            for name, info in attempt.outputs.items()
        }
        metrics = {c.name: c.value for c in attempt.checks if c.value is not None}
        return replace(attempt, outputs=outputs, metrics={**attempt.metrics, **metrics})

    def _drop(self, spec: WorkerSpec, handle: WorkerHandle | None, *, fresh: bool) -> None:
        if handle is None:
            return
        if fresh:
            handle.kill()
        else:
            self.pool.discard(spec)

    def close(self) -> None:
        self.pool.close()
