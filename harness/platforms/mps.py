"""Apple silicon through ``torch.backends.mps``: one device, no device pinning variable."""

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


class MPS(Platform):
    name = "mps"
    default_arch = "apple-m2"
    simulated_device_name = "Apple M2"

    def capabilities(self, arch: str | None) -> tuple[str, ...]:
        return ("bf16", "peak_memory")

    def detect(self) -> Detection:
        torch = _torch()
        if torch is None:
            return Detection(False, "torch is not installed")
        if not torch.backends.mps.is_available():
            return Detection(False, "torch.backends.mps.is_available() is False")
        return Detection(True, "Apple MPS")

    def identity(self) -> Identity:
        return Identity(
            platform=self.name,
            arch=None,
            fp8=None,
            capabilities=self.capabilities(None),
            device_names=("Apple MPS",),
            device_count=1,
            reason="Apple MPS",
        )


PLATFORM = MPS()
