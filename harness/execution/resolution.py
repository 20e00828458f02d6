"""Platform resolution: what one side runs as on one platform, settled once, before its first
attempt, into one frozen :class:`ResolvedPlatform` that every attempt of that (side, platform)
carries.

It is the one place the manager asks :mod:`harness.platforms` anything: the platform policy on
this run's runner class (:mod:`harness.platforms.policy`, once per platform), the identity the
attempts run as (asked once of a persistent worker, never of a fresh one: a cold-import case
must find its interpreter bare; for a fresh-process case on the manager's own interpreter it
is resolved here, so such a case starts no persistent worker it does not use), the device the
side's worker owns, the reference chain and the chain quality thresholds are read along. A
case is prepared against that record once (thresholds filled in, timeout scaled) and looked up
after: the attempt path and the judging of a result never call into ``platforms/``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from harness.cases import PlanItem
from harness.execution.devices import DeviceAssignment
from harness.execution.pool import WorkerSpec
from harness.execution.workers import SideSpec, side_worker
from harness.model import Case, Side
from harness.platforms import check, resolve_identity
from harness.platforms.base import Identity
from harness.platforms.policy import (
    Decision,
    Policy,
    fill_thresholds,
    quality_decisions,
    threshold_chain,
)
from harness.platforms.policy import resolve as resolve_policy
from harness.platforms.profile import Profile

__all__ = ["PreparedCase", "ProbeWorker", "ResolvedPlatform", "Resolver"]

# Asks the persistent worker of a spec what ``platform`` is there (``arch``: the profile's):
# (available, one-line detail, identity JSON or None).
ProbeWorker = Callable[[WorkerSpec, str, str | None], tuple[bool, str, Mapping[str, Any] | None]]


@dataclass(frozen=True)
class ResolvedPlatform:
    """One side on one platform, as every attempt of it runs and every result of it is judged."""

    side: Side
    platform: str
    # The identity its attempts run as (Identity JSON; None: unknown) and, when the platform is
    # not really here, why its results are simulated.
    identity: Mapping[str, Any] | None
    simulated: str | None
    policy: Policy
    # Where references are looked up: runner class (when this run's runner is of this
    # platform), the platform, then the policy's ``references.fallback``.
    reference_chain: tuple[str, ...]
    # Where a check's ``thresholds`` are read: the reference chain with ``<platform>:<arch>``.
    threshold_chain: tuple[str, ...]
    quality: Mapping[str, Decision]  # the policy's quality thresholds by metric
    worker: WorkerSpec  # the side's persistent worker on this platform (devices pinned)

    @property
    def devices(self) -> tuple[int, ...]:
        return self.worker.devices


@dataclass(frozen=True)
class PreparedCase:
    """A case as its platform's policy runs it: quality thresholds filled in, timeout scaled,
    and the policy record of its result (setting -> {value, rule, source})."""

    case: Case
    record: Mapping[str, Mapping[str, Any]]


class Resolver:
    """Resolves each (side, platform) once and each case once per (side, platform)."""

    def __init__(
        self,
        *,
        profile: Profile,
        sides: Mapping[Side, SideSpec],
        devices: DeviceAssignment,
        probe: ProbeWorker,
        preimport: tuple[str, ...] | None = None,
        say: Callable[[str], None] | None = None,
    ) -> None:
        self.profile = profile
        self.sides = sides
        self.devices = devices
        self.probe = probe
        self.preimport = preimport
        self.say = say or (lambda _line: None)
        self._policies: dict[str, Policy] = {}
        self._workers: dict[tuple[Side, str], WorkerSpec] = {}
        self._resolved: dict[tuple[Side, str], ResolvedPlatform] = {}
        self._unprobed: dict[tuple[Side, str], ResolvedPlatform] = {}
        # (side, platform, case id) -> the resolution a case was prepared against, and the case
        self._prepared: dict[tuple[Side, str, str], tuple[ResolvedPlatform, PreparedCase]] = {}

    def policy(self, platform: str) -> Policy:
        """The platform policy of ``platform`` on this run's runner class (resolved once)."""
        pol = self._policies.get(platform)
        if pol is None:
            pol = self._policies[platform] = resolve_policy(platform, self.profile)
        return pol

    def worker(self, side: Side, platform: str) -> WorkerSpec:
        """The persistent worker of ``side`` on ``platform`` (its device taken once)."""
        key = (side, platform)
        spec = self._workers.get(key)
        if spec is None:
            spec = self._workers[key] = side_worker(
                side,
                self.sides[side],
                platform,
                devices=self.devices.devices_of(side, platform),
                start_timeout_s=self.policy(platform).worker_start_s,
                threads=self.profile.threads,
                preimport=self.preimport,
            )
        return spec

    def resolve(self, side: Side, platform: str, *, fresh: bool = False) -> ResolvedPlatform:
        """What ``side`` runs as on ``platform``: resolved at the first call, looked up after."""
        found = self._resolved.get((side, platform))
        if found is not None:
            return found
        prof = self.profile
        arch = prof.arch if prof.platform == platform else None
        spec = self.worker(side, platform)
        if fresh and self.sides[side].python == sys.executable:
            ok, detail = check(platform)
            identity: Mapping[str, Any] | None = resolve_identity(platform, arch).to_json()
        else:
            ok, detail, identity = self.probe(spec, platform, arch)
        resolved = self._record(side, platform, identity, ok, detail)
        self._resolved[(side, platform)] = resolved
        return resolved

    def _record(
        self,
        side: Side,
        platform: str,
        identity: Mapping[str, Any] | None,
        ok: bool,
        detail: str,
    ) -> ResolvedPlatform:
        # Where the work then ran is told by the devices the attempts recorded (aggregate).
        reason = f"simulated: {platform} is not available here ({detail})"
        if not ok:
            shown = f" as {identity.get('arch')}" if identity and identity.get("arch") else ""
            self.say(
                f"platform {platform}: {reason}; runs on the CPU presenting {platform}{shown}; "
                "results labelled simulated"
            )
        line = self.devices.probed(platform, ok, detail)
        if line is not None:
            self.say(line)
        return self._make(side, platform, identity, None if ok else reason)

    def _make(
        self,
        side: Side,
        platform: str,
        identity: Mapping[str, Any] | None,
        simulated: str | None,
    ) -> ResolvedPlatform:
        pol = self.policy(platform)
        prof = self.profile
        chain = pol.reference_chain(prof.name if prof.platform == platform else None)
        ident = Identity.from_json(identity) if identity is not None else None
        return ResolvedPlatform(
            side=side,
            platform=platform,
            identity=identity,
            simulated=simulated,
            policy=pol,
            reference_chain=chain,
            threshold_chain=threshold_chain(chain, ident),
            quality=quality_decisions(pol),
            worker=self.worker(side, platform),
        )

    def resolved(self, side: Side, platform: str) -> ResolvedPlatform:
        """The resolution of (side, platform); one without an identity (never probed: no
        attempt of it started) when it was never resolved."""
        key = (side, platform)
        found = self._resolved.get(key) or self._unprobed.get(key)
        if found is None:
            found = self._unprobed[key] = self._make(side, platform, None, None)
        return found

    def prepared(self, resolved: ResolvedPlatform, case: Case) -> PreparedCase:
        """``case`` as ``resolved`` runs it (prepared once per (side, platform, case))."""
        key = (resolved.side, resolved.platform, case.id)
        found = self._prepared.get(key)
        if found is not None and found[0] is resolved:
            return found[1]
        filled, quality = fill_thresholds(
            case, resolved.platform, resolved.quality, resolved.threshold_chain
        )
        pol = resolved.policy
        filled = replace(filled, timeout_s=filled.timeout_s * pol.attempt_scale)
        record = {**pol.to_json(), **{k: d.to_json() for k, d in sorted(quality.items())}}
        prepared = PreparedCase(filled, record)
        self._prepared[key] = (resolved, prepared)
        return prepared

    def judging(self, side: Side, item: PlanItem) -> dict[str, Any]:
        """What :func:`~harness.execution.aggregate.aggregate` judges ``item`` of ``side`` by:
        why its platform is simulated, its identity, its policy and the policy's record
        (looked up: the case was prepared for its first attempt)."""
        resolved = self.resolved(side, item.platform)
        return {
            "simulated": resolved.simulated,
            "identity": resolved.identity,
            "policy": resolved.policy,
            "policy_record": self.prepared(resolved, item.case).record,
        }
