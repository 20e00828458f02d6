"""Which devices a worker process may use, and whether the runner has the devices its profile
says.

A worker is pinned at spawn through its platform's ``visible_devices_env``
(``CUDA_VISIBLE_DEVICES``, ``HIP_VISIBLE_DEVICES``, ``ASCEND_RT_VISIBLE_DEVICES``,
``ZE_AFFINITY_MASK``): the runtime then sees only those devices, renumbered from 0. With a
profile's ``device_count`` of N, the persistent worker of the k-th worker group (side x
platform, in the order they are first needed) owns device k mod N; under pytest-xdist every
worker process a pytest worker ``gwJ`` starts owns device J mod N instead, so xdist workers
never share a device. Where the manager itself was already restricted (the variable is set in
its environment, e.g. ``CUDA_VISIBLE_DEVICES=2,3`` by the CI job), indices are taken within
that set.

:func:`count_devices` answers how many devices a platform really has, in a separate, unpinned
interpreter (``python -m harness.platforms.devices NAME``), so the manager never imports torch
and a wedged driver cannot take it down.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness.platforms import REGISTRY, detect, get
from harness.platforms.base import Platform

XDIST_ENV = "PYTEST_XDIST_WORKER"
# The devices a worker was pinned to, as the manager assigned them (the pin variable's value).
PINNED_ENV = "HARNESS_DEVICES"
_COUNT_TIMEOUT_S = 120.0


def xdist_index(env: Mapping[str, str]) -> int | None:
    """``gw3`` -> 3 when this process is a pytest-xdist worker; None otherwise."""
    m = re.fullmatch(r"gw(\d+)", env.get(XDIST_ENV, ""))
    return int(m.group(1)) if m else None


def device_slot(slot: int, device_count: int, env: Mapping[str, str]) -> int | None:
    """The device (0-based, within what the manager sees) that worker group ``slot`` owns:
    ``slot mod device_count``, or the xdist worker's number mod ``device_count`` under
    pytest-xdist; None when the profile has no devices to share out."""
    if device_count < 1:
        return None
    x = xdist_index(env)
    return (x if x is not None else slot) % device_count


def pin_env(platform: Platform, devices: Sequence[int], env: Mapping[str, str]) -> dict[str, str]:
    """The environment that pins a worker of ``platform`` to ``devices`` (a set is allowed):
    ``{visible_devices_env: "0,1", HARNESS_DEVICES: "0,1"}``; empty when the platform has no
    pinning variable or ``devices`` is empty. Indices are within the manager's own visible set
    when its environment already restricts it."""
    var = platform.visible_devices_env
    if var is None or not devices:
        return {}
    inherited = [x.strip() for x in env.get(var, "").split(",") if x.strip()]
    chosen = [inherited[d % len(inherited)] if inherited else str(d) for d in devices]
    value = ",".join(chosen)
    return {var: value, PINNED_ENV: value}


@dataclass(frozen=True)
class DeviceCount:
    """How many devices of a platform an unpinned interpreter sees, or why it sees none."""

    platform: str
    available: bool
    reason: str
    count: int = 0
    names: tuple[str, ...] = ()


def count_here(name: str) -> DeviceCount:
    """Count ``name``'s devices in this process (imports its runtime)."""
    d = detect(name)
    if not d.available:
        return DeviceCount(name, False, d.reason)
    try:
        ident = get(name).identity()
    except Exception as exc:
        return DeviceCount(name, False, f"reading its devices failed: {type(exc).__name__}: {exc}")
    return DeviceCount(name, True, d.reason, ident.device_count, tuple(ident.device_names))


def count_devices(
    name: str, *, python: str = sys.executable, env: Mapping[str, str] | None = None
) -> DeviceCount:
    """Count ``name``'s devices in a fresh interpreter with ``env`` (default: this process's),
    with every device pinning variable removed so it sees all the runner has."""
    child = dict(os.environ if env is None else env)
    for plat in REGISTRY.values():
        if plat.visible_devices_env is not None:
            child.pop(plat.visible_devices_env, None)
    child.pop(PINNED_ENV, None)
    argv = [python, "-m", "harness.platforms.devices", name]
    try:
        proc = subprocess.run(
            argv, env=child, capture_output=True, text=True, timeout=_COUNT_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return DeviceCount(name, False, f"device count probe failed: {exc}")
    try:
        data: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        tail = (proc.stdout + proc.stderr).strip()[-500:]
        return DeviceCount(name, False, f"device count probe exited {proc.returncode}: {tail}")
    return DeviceCount(
        name,
        bool(data["available"]),
        str(data["reason"]),
        int(data["count"]),
        tuple(data["names"]),
    )


def check_device_count(
    profile_source: str, platform: str, wanted: int, found: DeviceCount
) -> tuple[bool, str]:
    """Whether the runner has the ``wanted`` devices (the profile's ``device_count``).

    Returns ``(ok, message)``. A simulated platform (not really here) is not checked, and the
    message says so; a real one with fewer devices than wanted is not ok, and the message names
    the profile file and the key ``device_count``.
    """
    where = profile_source or "the runner profile"
    if not found.available:
        return True, (
            f"{where}: device_count = {wanted} not checked: {platform} is simulated here "
            f"({found.reason})"
        )
    if found.count < wanted:
        names = ", ".join(found.names) or "none"
        return False, (
            f"{where}: key 'device_count' = {wanted}: this machine has only {found.count} "
            f"{platform} device(s) ({names}); lower device_count or run on a runner with "
            f"{wanted}"
        )
    return True, f"{where}: device_count = {wanted}: {found.count} {platform} device(s) here"


def promised_but_absent(
    profile_source: str, platform: str, wanted: int, found: DeviceCount
) -> str | None:
    """Why a runner profile that promises ``wanted`` devices of ``platform`` cannot have them
    here (the platform is not detected, or detecting it failed), or None when it is here.

    A profile that promises devices describes real hardware: running it simulated on a machine
    whose device is absent or broken would pass work the hardware never saw. The caller fails
    the run (infrastructure, exit 3) unless simulation was asked for."""
    if wanted < 1 or found.available:
        return None
    where = profile_source or "the runner profile"
    return (
        f"{where}: device_count = {wanted} promises {platform} device(s), but {platform} is "
        f"not available here ({found.reason}); run on a runner that has it, or pass --simulate "
        "to run simulated (results labelled simulated)"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m harness.platforms.devices NAME``: one JSON line with the device count."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m harness.platforms.devices PLATFORM", file=sys.stderr)
        return 2
    c = count_here(args[0])
    out = {"available": c.available, "reason": c.reason, "count": c.count, "names": c.names}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
