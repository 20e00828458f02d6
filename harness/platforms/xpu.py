"""Intel GPUs through ``torch.xpu``; devices pinned with ``ZE_AFFINITY_MASK``."""

from __future__ import annotations

from typing import Any

from harness.platforms.base import Detection, Identity, Platform


def _torch() -> Any:
    """torch, imported only when a runtime question is asked; None when not installed."""
    try:
        import torch
    except ImportError:
        return None
    return torch


class XPU(Platform):
    name = "xpu"
    default_arch = "pvc"
    simulated_device_name = "Intel Data Center GPU Max 1550"
    visible_devices_env = "ZE_AFFINITY_MASK"

    def capabilities(self, arch: str | None) -> tuple[str, ...]:
        return ("bf16", "device_events", "peak_memory")

    def detect(self) -> Detection:
        torch = _torch()
        if torch is None:
            return Detection(False, "torch is not installed")
        backend = getattr(torch, "xpu", None)
        if backend is None or not backend.is_available():
            return Detection(False, "torch.xpu.is_available() is False")
        return Detection(True, "torch.xpu is available")

    def identity(self) -> Identity:
        torch = _torch()
        backend = torch.xpu
        n = int(backend.device_count())
        names = tuple(str(backend.get_device_name(i)) for i in range(n))
        arch = None
        return Identity(
            platform=self.name,
            arch=arch,
            fp8=self.fp8_flavour(arch),
            capabilities=self.capabilities(arch),
            device_names=names,
            device_count=n,
            reason=names[0] if names else self.name,
        )


PLATFORM = XPU()
