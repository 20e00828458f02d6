"""NVIDIA CUDA: torch with CUDA available and *not* a ROCm/HIP build (those report cuda too).

Architecture is the compute capability as ``sm_XY``. FP8 (OCP ``e4m3fn``) needs sm_89 (Ada)
or newer; ``torch._int_mm`` needs sm_75 (Turing) or newer. Stage timing uses
``torch.cuda.Event(enable_timing=True)``; peak memory is ``torch.cuda.max_memory_allocated``
after ``reset_peak_memory_stats``.
"""

from __future__ import annotations

import re
from typing import Any

from harness.platforms._runtime import device_properties, import_torch, torch_build
from harness.platforms.base import Detection, FP8Flavour, Identity, Platform, loaded_torch

_SM = re.compile(r"sm_(\d+)")


def sm_number(arch: str | None) -> int | None:
    """``sm_90`` -> 90; None when ``arch`` is not of that form."""
    m = _SM.fullmatch(arch or "")
    return int(m.group(1)) if m else None


def cuda_driver_version(torch: Any) -> str | None:
    """The CUDA driver API version (``12.4``) through torch's binding, where it has one."""
    get = getattr(torch._C, "_cuda_getDriverVersion", None)
    if get is None:
        return None
    try:
        v = int(get())
    except Exception:
        return None
    return f"{v // 1000}.{(v % 1000) // 10}" if v > 0 else None


class CUDA(Platform):
    name = "cuda"
    default_arch = "sm_90"
    simulated_device_name = "NVIDIA H100 80GB HBM3"
    visible_devices_env = "CUDA_VISIBLE_DEVICES"
    has_device_events = True
    has_peak_memory = True

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
        build = torch_build()
        if build is None:
            return Detection(False, "torch is not installed")
        if build.hip:
            return Detection(False, f"this torch is a ROCm/HIP build ({build.hip})")
        if not build.cuda:
            return Detection(False, f"this torch ({build.version}) is built without CUDA")
        torch = import_torch()
        if torch is None:
            return Detection(False, "torch is not installed")
        if not torch.cuda.is_available():
            return Detection(False, "torch.cuda.is_available() is False")
        return Detection(True, torch.cuda.get_device_name(0))

    def identity(self) -> Identity:
        torch = import_torch()
        n = torch.cuda.device_count()
        major, minor = torch.cuda.get_device_capability(0)
        arch = f"sm_{major}{minor}"
        devices = [device_properties(torch.cuda, i) for i in range(n)]
        return Identity(
            platform=self.name,
            arch=arch,
            fp8=self.fp8_flavour(arch),
            capabilities=self.capabilities(arch),
            device_names=tuple(str(d["name"]) for d in devices),
            device_count=n,
            driver=cuda_driver_version(torch),
            runtime=torch.version.cuda,
            reason=torch.cuda.get_device_name(0),
            extra={"devices": devices, "capability": f"{major}.{minor}"},
        )

    def backend(self) -> Any | None:
        torch = loaded_torch()
        if torch is None or getattr(torch.version, "hip", None):
            return None
        return torch.cuda if torch.cuda.is_initialized() else None


PLATFORM = CUDA()
