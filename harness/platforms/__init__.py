"""Platform registry: can this machine really run platform X, or would it be simulated?

Each platform is a one-method probe (``available() -> (bool, detail)``) run inside a worker,
where torch is already imported. A platform that is not really there is still runnable (the
target sees ``probe.platform()`` and takes that platform's code paths on the CPU), but every
result is labelled ``simulated``: a CUDA pass on a machine without CUDA is never reported as a
CUDA pass.

The full platform layer (per-platform synchronization, device selection, HIP/NPU policy) comes
with the platforms work; this module is its seam.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

Probe = Callable[[], tuple[bool, str]]


def _torch() -> object | None:
    try:
        import torch
    except ImportError:
        return None
    return torch


def _cpu() -> tuple[bool, str]:
    return True, "the CPU is always there"


def _cuda() -> tuple[bool, str]:
    torch = _torch()
    if torch is None:
        return False, "torch is not installed"
    if getattr(torch.version, "hip", None):  # type: ignore[attr-defined]
        return False, f"this torch is a ROCm/HIP build ({torch.version.hip})"  # type: ignore[attr-defined]
    if not torch.cuda.is_available():  # type: ignore[attr-defined]
        return False, "torch.cuda.is_available() is False"
    return True, torch.cuda.get_device_name(0)  # type: ignore[attr-defined]


def _hip() -> tuple[bool, str]:
    torch = _torch()
    if torch is None:
        return False, "torch is not installed"
    if not getattr(torch.version, "hip", None):  # type: ignore[attr-defined]
        return False, "this torch is not a ROCm/HIP build"
    if not torch.cuda.is_available():  # type: ignore[attr-defined]
        return False, "torch.cuda.is_available() is False on this HIP build"
    return True, torch.cuda.get_device_name(0)  # type: ignore[attr-defined]


def _backend(attr: str, module: str | None = None) -> Probe:
    def probe() -> tuple[bool, str]:
        torch = _torch()
        if torch is None:
            return False, "torch is not installed"
        if module is not None and module not in sys.modules:
            try:
                __import__(module)
            except ImportError:
                return False, f"{module} is not installed"
        backend = getattr(torch, attr, None)
        if backend is None or not backend.is_available():
            return False, f"torch.{attr}.is_available() is False"
        return True, f"torch.{attr} is available"

    return probe


def _mps() -> tuple[bool, str]:
    torch = _torch()
    if torch is None:
        return False, "torch is not installed"
    if not torch.backends.mps.is_available():  # type: ignore[attr-defined]
        return False, "torch.backends.mps.is_available() is False"
    return True, "Apple MPS"


REGISTRY: dict[str, Probe] = {
    "cpu": _cpu,
    "cuda": _cuda,
    "hip": _hip,
    "npu": _backend("npu", "torch_npu"),
    "xpu": _backend("xpu"),
    "mps": lambda: _mps(),
}


def names() -> tuple[str, ...]:
    """The known platform names, in registry order: ``harness.model.vocab.PLATFORMS``, which
    case files and runner profiles are validated against, holds the same names."""
    return tuple(REGISTRY)


def check(platform: str) -> tuple[bool, str]:
    """Whether ``platform`` is really present here, and a one-line detail that says why."""
    probe = REGISTRY.get(platform)
    if probe is None:
        known = ", ".join(sorted(REGISTRY))
        return False, f"unknown platform '{platform}' (known: {known})"
    try:
        return probe()
    except Exception as exc:  # a broken driver is "not available", with its message
        return False, f"{type(exc).__name__}: {exc}"
