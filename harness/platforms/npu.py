"""Huawei Ascend NPU through ``torch_npu``: present when it imports and reports a device.

Architecture is the SoC name, which ``torch_npu`` gives as the device name
(``torch.npu.get_device_name()`` -> ``Ascend910B3``; ``torch.npu.get_soc_version()`` is its
number, 223). The 910B has no FP8 matmul and no ``torch._int_mm``; its devices are pinned with
``ASCEND_RT_VISIBLE_DEVICES``. Stage timing uses ``torch.npu.Event(enable_timing=True)``; peak
memory ``torch.npu.max_memory_allocated``.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys
from typing import Any

from harness.platforms._runtime import device_properties, import_torch, torch_build
from harness.platforms.base import Detection, Identity, Platform, loaded_torch


class NPU(Platform):
    name = "npu"
    default_arch = "Ascend910B3"
    simulated_device_name = "Ascend 910B3"
    visible_devices_env = "ASCEND_RT_VISIBLE_DEVICES"
    has_device_events = True
    has_peak_memory = True

    def capabilities(self, arch: str | None) -> tuple[str, ...]:
        return ("bf16", "device_events", "peak_memory")

    def _runtime(self) -> tuple[Any, Any] | str:
        """(torch, torch_npu), or why not (without importing torch where torch_npu, which
        imports it, is not installed)."""
        if torch_build() is None:
            return "torch is not installed"
        with contextlib.suppress(ImportError, ValueError):  # ValueError: a stand-in without spec
            if "torch_npu" not in sys.modules and importlib.util.find_spec("torch_npu") is None:
                return "torch_npu is not installed (no module named 'torch_npu')"
        torch = import_torch()
        if torch is None:
            return "torch is not installed"
        try:
            torch_npu = importlib.import_module("torch_npu")
        except ImportError as exc:
            return f"torch_npu is not installed ({exc})"
        return torch, torch_npu

    def detect(self) -> Detection:
        rt = self._runtime()
        if isinstance(rt, str):
            return Detection(False, rt)
        torch, _ = rt
        backend = getattr(torch, "npu", None)
        if backend is None:
            return Detection(False, "torch_npu imported but torch.npu is missing")
        if not backend.is_available():
            return Detection(False, "torch.npu.is_available() is False")
        n = int(backend.device_count())
        if n < 1:
            return Detection(False, "torch.npu reports no device")
        name = getattr(backend, "get_device_name", None)
        return Detection(True, str(name(0)) if name else f"torch.npu reports {n} device(s)")

    def identity(self) -> Identity:
        rt = self._runtime()
        assert not isinstance(rt, str), rt
        torch, torch_npu = rt
        backend = torch.npu
        n = int(backend.device_count())
        devices = [device_properties(backend, i) for i in range(n)]
        names = tuple(str(d["name"]) for d in devices)
        soc = str(backend.get_device_name(0)).replace(" ", "") if n else None
        extra: dict[str, Any] = {"devices": devices}
        get_soc = getattr(backend, "get_soc_version", None)
        if get_soc is not None:
            try:
                extra["soc_version"] = int(get_soc())
            except Exception as exc:
                extra["soc_version_reason"] = f"{type(exc).__name__}: {exc}"
        return Identity(
            platform=self.name,
            arch=soc,
            fp8=self.fp8_flavour(soc),
            capabilities=self.capabilities(soc),
            device_names=names,
            device_count=n,
            driver=getattr(getattr(torch_npu, "version", None), "cann", None),
            runtime=getattr(torch_npu, "__version__", None),
            reason=names[0] if names else self.name,
            extra=extra,
        )

    def backend(self) -> Any | None:
        torch = loaded_torch()
        if torch is None or "torch_npu" not in sys.modules:
            return None
        npu = getattr(torch, "npu", None)
        return npu if npu is not None and npu.is_initialized() else None


PLATFORM = NPU()
