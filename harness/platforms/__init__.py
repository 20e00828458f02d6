"""Platform registry: one module per platform behind :class:`~harness.platforms.base.Platform`.

A platform that is not really there is still runnable: the attempt runs on the CPU while
presenting that platform's :class:`~harness.platforms.base.Identity` (architecture, FP8 flavour,
capabilities) to the harness and, through the probe, to the target; every such result is
labelled ``simulated``, so a CUDA pass on a machine without CUDA is never reported as one.

Third-party platforms come in through the ``harness.platforms`` entry point group: each entry
point names a :class:`Platform` *instance* (``myplat = "my_pkg.platform:PLATFORM"``). They are
loaded on first use; one that fails to load, is not a Platform, or reuses a built-in name is
left out and reported with its name (:func:`third_party_errors`), never raised.

Detection imports torch (or the vendor module) lazily: ``import harness.platforms`` stays light;
on a torch built for no device runtime it reads the build (:func:`torch_build`) and does not
import torch at all.
"""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass

from harness.platforms import cpu, cuda, hip, mps, npu, xpu
from harness.platforms._runtime import TorchBuild, torch_build
from harness.platforms.base import (
    CAPABILITIES,
    Detection,
    Identity,
    Platform,
    StageMark,
    StageReading,
)

__all__ = [
    "CAPABILITIES",
    "ENTRY_POINT_GROUP",
    "REGISTRY",
    "Detection",
    "Identity",
    "Platform",
    "PlatformStatus",
    "StageMark",
    "StageReading",
    "TorchBuild",
    "available",
    "check",
    "detect",
    "fingerprints",
    "get",
    "known",
    "names",
    "resolve_identity",
    "statuses",
    "third_party",
    "third_party_errors",
    "torch_build",
    "why_not",
]

ENTRY_POINT_GROUP = "harness.platforms"

# The built-in platforms; ``harness.model.vocab.PLATFORMS`` holds the same names.
REGISTRY: dict[str, Platform] = {
    m.PLATFORM.name: m.PLATFORM for m in (cpu, cuda, hip, npu, xpu, mps)
}

_third_party: dict[str, Platform] | None = None
_third_party_errors: list[str] = []


def _load_third_party() -> dict[str, Platform]:
    """The platforms of the ``harness.platforms`` entry points, loaded once per process."""
    global _third_party
    if _third_party is not None:
        return _third_party
    found: dict[str, Platform] = {}
    errors: list[str] = []
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        where = f"entry point '{ep.name}' ({ENTRY_POINT_GROUP} = {ep.value!r})"
        try:
            obj = ep.load()
        except Exception as exc:  # a broken plugin is reported, never fatal
            errors.append(f"{where}: failed to load: {type(exc).__name__}: {exc}")
            continue
        if not isinstance(obj, Platform):
            errors.append(
                f"{where}: is a {type(obj).__name__}, expected a harness.platforms.Platform "
                "instance"
            )
            continue
        if not obj.name or obj.name != ep.name:
            errors.append(
                f"{where}: its Platform is named {obj.name!r}; the entry point name and "
                "Platform.name must be the same"
            )
            continue
        if obj.name in REGISTRY or obj.name in found:
            errors.append(f"{where}: the name '{obj.name}' is already taken; left out")
            continue
        found[obj.name] = obj
    _third_party_errors[:] = errors
    _third_party = found
    return found


def third_party() -> dict[str, Platform]:
    """The third-party platforms that loaded, by name."""
    return dict(_load_third_party())


def third_party_errors() -> list[str]:
    """One line per third-party entry point that was left out, naming it and why."""
    _load_third_party()
    return list(_third_party_errors)


def names() -> tuple[str, ...]:
    """The built-in platform names, in registry order: ``harness.model.vocab.PLATFORMS``,
    which case files and runner profiles are validated against, holds the same names."""
    return tuple(REGISTRY)


def known() -> tuple[str, ...]:
    """Every platform name this process can resolve: built-ins, then third-party ones."""
    return (*REGISTRY, *_load_third_party())


def get(name: str) -> Platform:
    """The platform called ``name``; a KeyError that lists the known names otherwise."""
    plat = REGISTRY.get(name) or _load_third_party().get(name)
    if plat is not None:
        return plat
    raise KeyError(f"unknown platform '{name}' (known: {', '.join(sorted(known()))})")


def detect(name: str) -> Detection:
    """Whether ``name`` is really present here; a broken driver is "not available" with its
    message, never an exception."""
    try:
        plat = get(name)
    except KeyError as exc:
        return Detection(False, str(exc.args[0]))
    try:
        return plat.detect()
    except Exception as exc:
        return Detection(False, f"{type(exc).__name__}: {exc}")


def check(platform: str) -> tuple[bool, str]:
    """Whether ``platform`` is really present here, and a one-line detail that says why."""
    d = detect(platform)
    return d.available, d.reason


def why_not(platform: str) -> str | None:
    """None when ``platform`` is really here, else the reason it is not."""
    d = detect(platform)
    return None if d.available else d.reason


def available() -> tuple[str, ...]:
    """The platforms (built-in and third-party) really present here, in registry order."""
    return tuple(n for n in known() if detect(n).available)


def resolve_identity(platform: str, arch: str | None = None) -> Identity:
    """What an attempt on ``platform`` runs as here: the real devices when the platform is
    detected, otherwise its simulated identity for ``arch`` (the platform's default when None)
    with the reason it is simulated."""
    d = detect(platform)
    plat = get(platform)
    if d.available:
        try:
            return plat.identity()
        except Exception as exc:
            reason = f"detected, but reading its identity failed: {type(exc).__name__}: {exc}"
            return plat.simulated_identity(arch, reason=f"simulated: {reason}")
    return plat.simulated_identity(
        arch, reason=f"simulated: {platform} is not available here ({d.reason})"
    )


def fingerprints() -> dict[str, dict[str, object]]:
    """The fingerprint of every platform really present here (the CPU included): driver,
    runtime, architecture, device names, memory, multiprocessors and clocks where readable.
    A platform whose fingerprint cannot be read records the error instead."""
    out: dict[str, dict[str, object]] = {}
    for name in known():
        if not detect(name).available:
            continue
        try:
            out[name] = get(name).fingerprint()
        except Exception as exc:
            out[name] = {"platform": name, "error": f"{type(exc).__name__}: {exc}"}
    return out


@dataclass(frozen=True)
class PlatformStatus:
    """One platform as this machine has it: detected or not (and why), the identity an
    attempt would run as (real, or simulated), and where it comes from."""

    name: str
    available: bool
    reason: str
    identity: Identity
    third_party: bool = False


def statuses() -> list[PlatformStatus]:
    """Every known platform's status here, built-ins first."""
    out = []
    for name in known():
        d = detect(name)
        out.append(
            PlatformStatus(
                name=name,
                available=d.available,
                reason=d.reason,
                identity=resolve_identity(name),
                third_party=name not in REGISTRY,
            )
        )
    return out
