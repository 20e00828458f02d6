"""NVIDIA CUDA: torch with CUDA available and *not* a ROCm/HIP build (those report cuda too).

Architecture is the compute capability as ``sm_XY``. FP8 (OCP ``e4m3fn``) needs sm_89 (Ada)
or newer; ``torch._int_mm`` needs sm_75 (Turing) or newer.
"""

from __future__ import annotations

import re
from typing import Any

from harness.platforms.base import Detection, FP8Flavour, Identity, Platform


def _torch() -> Any:
    """torch, imported only when a runtime question is asked; None when not installed."""
    try:
        import torch
    except ImportError:
        return None
    return torch


_SM = re.compile(r"sm_(\d+)")


def sm_number(arch: str | None) -> int | None:
    """``sm_90`` -> 90; None when ``arch`` is not of that form."""
    m = _SM.fullmatch(arch or "")
    return int(m.group(1)) if m else None


class CUDA(Platform):
    name = "cuda"
    default_arch = "sm_90"
    simulated_device_name = "NVIDIA H100 80GB HBM3"
    visible_devices_env = "CUDA_VISIBLE_DEVICES"

    def fp8_flavour(self, arch: str | None) -> FP8Flavour | None:
        sm = sm_number(arch)
        return "e4m3fn" if sm is not None and sm >= 89 else None

    def capabilities(self, arch: str | None) -> tuple[str, ...]:
        sm = sm_number(arch) or 0
        caps = {"device_events", "peak_memory", "fused_kernels"}
        if sm >= 75:
            caps.add("int8_mm")
        if sm >= 80:
            caps.add("bf16")
        if self.fp8_flavour(arch):
            caps.add("fp8")
        return tuple(sorted(caps))

    def detect(self) -> Detection:
        torch = _torch()
        if torch is None:
            return Detection(False, "torch is not installed")
        if getattr(torch.version, "hip", None):
            return Detection(False, f"this torch is a ROCm/HIP build ({torch.version.hip})")
        if not torch.cuda.is_available():
            return Detection(False, "torch.cuda.is_available() is False")
        return Detection(True, torch.cuda.get_device_name(0))

    def identity(self) -> Identity:
        torch = _torch()
        n = torch.cuda.device_count()
        major, minor = torch.cuda.get_device_capability(0)
        arch = f"sm_{major}{minor}"
        return Identity(
            platform=self.name,
            arch=arch,
            fp8=self.fp8_flavour(arch),
            capabilities=self.capabilities(arch),
            device_names=tuple(torch.cuda.get_device_name(i) for i in range(n)),
            device_count=n,
            runtime=torch.version.cuda,
            reason=torch.cuda.get_device_name(0),
        )


PLATFORM = CUDA()
