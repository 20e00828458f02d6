"""Which device each worker group of a run owns, and whether the machine has the devices the
runner profile shares out.

A worker group is (side, platform). Only the profile's own platform is pinned, and only when
the profile has a ``device_count``: platforms take slots in the order they are first needed
(:func:`harness.platforms.devices.device_slot` maps a slot to a device, an xdist worker
``gwJ`` taking device J mod N), and the base and head workers of one platform share its
device, so the two sides of a same-runner comparison run on one device, never two (they
never run at the same time). A multi-rank or multi-rank server case runs in a worker of its own
that owns one device per rank (:meth:`DeviceAssignment.for_ranks`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from harness.errors import ProfileError
from harness.execution.pool import WorkerSpec
from harness.execution.spawn import import_env
from harness.model import Side
from harness.platforms.devices import check_device_count, count_devices, device_slot
from harness.platforms.profile import Profile

__all__ = ["DeviceAssignment"]


class DeviceAssignment:
    """The devices of one run or comparison (one per executor)."""

    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        self._slots: dict[tuple[str, str], int] = {}  # worker group -> its slot
        self._platform_slots: dict[str, int] = {}  # platform -> its slot, shared by the sides
        self.check: str | None = None  # what the check of device_count against the machine said

    def devices_of(self, side: Side, platform: str) -> tuple[int, ...]:
        """The device the worker group (side, platform) owns; ``()``: not pinned."""
        prof = self.profile
        if prof.device_count < 1 or platform != prof.platform:
            return ()
        slot = self._platform_slots.setdefault(platform, len(self._platform_slots))
        self._slots.setdefault((side, platform), slot)
        device = device_slot(slot, prof.device_count, os.environ)
        return () if device is None else (device,)

    def for_ranks(self, devices: tuple[int, ...], ranks: int) -> tuple[int, ...]:
        """The devices a case of ``ranks`` processes runs on, from a worker pinned to
        ``devices``: that many device slots from its first one on (mod the profile's
        ``device_count``; fewer when the profile has fewer, the ranks then sharing them round
        robin). Unpinned (``()``) or enough already: ``devices`` as they are."""
        count = self.profile.device_count
        if not devices or ranks <= len(devices) or count < 1:
            return devices
        first = devices[0]
        return tuple((first + i) % count for i in range(min(ranks, count)))

    def groups(self) -> int:
        """How many worker groups have taken a device slot so far."""
        return len(self._slots)

    def check_machine(
        self,
        platforms: Iterable[str],
        *,
        code_roots: tuple[str, ...],
        python: str,
        say: Any,
    ) -> None:
        """Check the profile's ``device_count`` against this machine before any work, when the
        plan runs on the profile's platform and the profile shares out several devices.

        Counted in an unpinned interpreter (``python`` with ``code_roots`` on its path); a
        real platform with fewer devices raises a ProfileError naming the profile file and the
        key. A ``device_count`` of 1 needs no count: the platform probe of the first attempt
        says whether the device is there (:meth:`probed`).
        """
        prof = self.profile
        if self.check is not None or prof.platform not in set(platforms):
            return
        if prof.device_count < 2:
            return
        env = import_env(code_roots, os.environ)
        found = count_devices(prof.platform, python=python, env=env)
        ok, msg = check_device_count(prof.source, prof.platform, prof.device_count, found)
        self.check = msg
        say(msg)
        if not ok:
            raise ProfileError(msg)

    def probed(self, platform: str, available: bool, detail: str) -> str | None:
        """Record what the platform probe said of the profile's platform, when nothing was
        counted before; returns the line to tell the user (a simulated platform's count is not
        checked), or None."""
        prof = self.profile
        if self.check is not None or platform != prof.platform or prof.device_count < 1:
            return None
        where = prof.source or "the runner profile"
        if available:
            self.check = (
                f"{where}: device_count = {prof.device_count}: {platform} is here ({detail})"
            )
            return None
        self.check = (
            f"{where}: device_count = {prof.device_count} not checked: {platform} is "
            f"simulated here ({detail})"
        )
        return self.check

    def record(self, side: Side) -> Mapping[str, Any]:
        """What the environment record says about devices: the profile's count, the check,
        and the device each worker group of this side was pinned to."""
        prof = self.profile
        pins = {
            plat: WorkerSpec(plat, devices=self.devices_of(s, plat))
            .pin_env()
            .get("HARNESS_DEVICES")
            for (s, plat) in self._slots
            if s == side
        }
        return {
            "profile_platform": prof.platform,
            "device_count": prof.device_count,
            "check": self.check,
            "pinned": pins,
        }
