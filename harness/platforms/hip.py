"""AMD ROCm/HIP: torch built with ``torch.version.hip``; devices appear as ``cuda`` in torch.

Architecture is the ``gcnArchName`` base (``gfx942`` for MI300X/MI325X, ``gfx950`` for
MI350X/MI355X). FP8: MI300-class (gfx940/941/942) computes in ``e4m3fnuz``; gfx950 moved to OCP
``e4m3fn``. CUDA-only fused kernels are not available on HIP. Stage timing and peak memory go
through ``torch.cuda`` (HIP's events and allocator stand behind it).
"""

from __future__ import annotations

from typing import Any

from harness.platforms._runtime import device_properties, import_torch, torch_build
from harness.platforms.base import Detection, FP8Flavour, Identity, Platform, loaded_torch

FNUZ_ARCHS = ("gfx940", "gfx941", "gfx942")
FN_ARCHS = ("gfx950", "gfx1200", "gfx1201")


def base_arch(gcn_arch_name: str | None) -> str | None:
    """``gfx942:sramecc+:xnack-`` -> ``gfx942``."""
    return gcn_arch_name.split(":", 1)[0] if gcn_arch_name else None


class HIP(Platform):
    name = "hip"
    default_arch = "gfx942"
    simulated_device_name = "AMD Instinct MI300X"
    visible_devices_env = "HIP_VISIBLE_DEVICES"
    has_device_events = True
    has_peak_memory = True

    def fp8_flavour(self, arch: str | None) -> FP8Flavour | None:
        a = base_arch(arch)
        if a in FNUZ_ARCHS:
            return "e4m3fnuz"
        if a in FN_ARCHS:
            return "e4m3fn"
        return None

    def capabilities(self, arch: str | None) -> tuple[str, ...]:
        caps = {"device_events", "peak_memory", "bf16"}
        if self.fp8_flavour(arch):
            caps.add("fp8")
        return tuple(sorted(caps))

    def detect(self) -> Detection:
        build = torch_build()
        if build is None:
            return Detection(False, "torch is not installed")
        if not build.hip:
            return Detection(False, "this torch is not a ROCm/HIP build")
        torch = import_torch()
        if torch is None:
            return Detection(False, "torch is not installed")
        if not torch.cuda.is_available():
            return Detection(False, "torch.cuda.is_available() is False on this HIP build")
        return Detection(True, torch.cuda.get_device_name(0))

    def identity(self) -> Identity:
        torch = import_torch()
        n = torch.cuda.device_count()
        gcn = getattr(torch.cuda.get_device_properties(0), "gcnArchName", None)
        arch = base_arch(gcn)
        devices = [device_properties(torch.cuda, i) for i in range(n)]
        return Identity(
            platform=self.name,
            arch=arch,
            fp8=self.fp8_flavour(arch),
            capabilities=self.capabilities(arch),
            device_names=tuple(str(d["name"]) for d in devices),
            device_count=n,
            driver=None,  # the amdgpu driver is read by the environment record (rocm-smi)
            runtime=torch.version.hip,
            reason=torch.cuda.get_device_name(0),
            extra={"devices": devices, "gcn_arch_name": gcn},
        )

    def backend(self) -> Any | None:
        torch = loaded_torch()
        if torch is None or not getattr(torch.version, "hip", None):
            return None
        return torch.cuda if torch.cuda.is_initialized() else None


PLATFORM = HIP()
