"""Platform registry: one module per platform behind :class:`~harness.platforms.base.Platform`.

A platform that is not really there is still runnable: the attempt runs on the CPU while
presenting that platform's :class:`~harness.platforms.base.Identity` (architecture, FP8 flavour,
capabilities) to the harness and, through the probe, to the target; every such result is
labelled ``simulated``, so a CUDA pass on a machine without CUDA is never reported as one.

Detection imports torch (or the vendor module) lazily: ``import harness.platforms`` stays light.
"""

from __future__ import annotations

from harness.platforms import cpu, cuda, hip, mps, npu, xpu
from harness.platforms.base import CAPABILITIES, Detection, Identity, Platform

__all__ = [
    "CAPABILITIES",
    "REGISTRY",
    "Detection",
    "Identity",
    "Platform",
    "check",
    "get",
    "names",
    "resolve_identity",
]

REGISTRY: dict[str, Platform] = {
    m.PLATFORM.name: m.PLATFORM for m in (cpu, cuda, hip, npu, xpu, mps)
}


def names() -> tuple[str, ...]:
    """The known platform names, in registry order: ``harness.model.vocab.PLATFORMS``, which
    case files and runner profiles are validated against, holds the same names."""
    return tuple(REGISTRY)


def get(name: str) -> Platform:
    """The platform called ``name``; a KeyError that lists the known names otherwise."""
    try:
        return REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(REGISTRY))
        raise KeyError(f"unknown platform '{name}' (known: {known})") from None


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
