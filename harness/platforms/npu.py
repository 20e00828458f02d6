"""Huawei Ascend NPU through ``torch_npu``: present when it imports and reports a device.

Architecture is the SoC name (``Ascend910B3``, ...). The 910B has no FP8 matmul and no
``torch._int_mm``; its devices are pinned with ``ASCEND_RT_VISIBLE_DEVICES``.
"""

from __future__ import annotations

import sys
from typing import Any

from harness.platforms.base import Detection, Identity, Platform


def _torch() -> Any:
    """torch, imported only when a runtime question is asked; None when not installed."""
    try:
        import torch
    except ImportError:
        return None
    return torch


class NPU(Platform):
    name = "npu"
    default_arch = "Ascend910B3"
    simulated_device_name = "Ascend 910B3"
    visible_devices_env = "ASCEND_RT_VISIBLE_DEVICES"

    def capabilities(self, arch: str | None) -> tuple[str, ...]:
        return ("bf16", "device_events", "peak_memory")

    def detect(self) -> Detection:
        torch = _torch()
        if torch is None:
            return Detection(False, "torch is not installed")
        if "torch_npu" not in sys.modules:
            try:
                __import__("torch_npu")
            except ImportError:
                return Detection(False, "torch_npu is not installed")
        backend = getattr(torch, "npu", None)
        if backend is None or not backend.is_available():
            return Detection(False, "torch.npu.is_available() is False")
        return Detection(True, "torch.npu is available")

    def identity(self) -> Identity:
        torch = _torch()
        backend = torch.npu
        n = int(backend.device_count())
        names = tuple(str(backend.get_device_name(i)) for i in range(n))
        arch = names[0].replace(" ", "") if names else None
        return Identity(
            platform=self.name,
            arch=arch,
            fp8=self.fp8_flavour(arch),
            capabilities=self.capabilities(arch),
            device_names=names,
            device_count=n,
            reason=names[0] if names else self.name,
        )


PLATFORM = NPU()
