"""Intel GPUs through ``torch.xpu``; devices pinned with ``ZE_AFFINITY_MASK``.

Stage timing uses ``torch.xpu.Event(enable_timing=True)``; peak memory
``torch.xpu.max_memory_allocated``. The architecture is not exposed by torch in a stable form,
so it is None on real devices (the device name identifies them).
"""

from __future__ import annotations

from typing import Any

from harness.platforms._runtime import device_properties, import_torch, torch_build
from harness.platforms.base import Detection, Identity, Platform, loaded_torch


class XPU(Platform):
    name = "xpu"
    default_arch = "pvc"
    simulated_device_name = "Intel Data Center GPU Max 1550"
    visible_devices_env = "ZE_AFFINITY_MASK"
    has_device_events = True
    has_peak_memory = True

    def capabilities(self, arch: str | None) -> tuple[str, ...]:
        return ("bf16", "device_events", "peak_memory")

    def detect(self) -> Detection:
        build = torch_build()
        if build is None:
            return Detection(False, "torch is not installed")
        if not build.xpu:
            return Detection(False, f"this torch ({build.version}) is built without XPU")
        torch = import_torch()
        if torch is None:
            return Detection(False, "torch is not installed")
        backend = getattr(torch, "xpu", None)
        if backend is None or not backend.is_available():
            return Detection(False, "torch.xpu.is_available() is False")
        return Detection(True, str(backend.get_device_name(0)))

    def identity(self) -> Identity:
        torch = import_torch()
        backend = torch.xpu
        n = int(backend.device_count())
        devices = [device_properties(backend, i) for i in range(n)]
        names = tuple(str(d["name"]) for d in devices)
        props = backend.get_device_properties(0) if n else None
        return Identity(
            platform=self.name,
            arch=None,
            fp8=None,
            capabilities=self.capabilities(None),
            device_names=names,
            device_count=n,
            driver=getattr(props, "driver_version", None),
            runtime=getattr(torch.version, "xpu", None),
            reason=names[0] if names else self.name,
            extra={"devices": devices},
        )

    def backend(self) -> Any | None:
        torch = loaded_torch()
        xpu = getattr(torch, "xpu", None) if torch is not None else None
        if xpu is None or not hasattr(xpu, "is_initialized"):
            return None
        return xpu if xpu.is_initialized() else None


PLATFORM = XPU()
