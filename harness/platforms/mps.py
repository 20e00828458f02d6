"""Apple silicon through ``torch.backends.mps``: one device, no device pinning variable.

Stage timing uses ``torch.mps.Event(enable_timing=True)``. MPS has no peak-allocation counter
(only the current allocation), so stage memory is not recorded there.
"""

from __future__ import annotations

import platform as _pyplatform
import sys
from typing import Any

from harness.platforms._runtime import import_torch
from harness.platforms.base import Detection, Identity, Platform, loaded_torch


class MPS(Platform):
    name = "mps"
    default_arch = "apple-m2"
    simulated_device_name = "Apple M2"
    has_device_events = True

    def capabilities(self, arch: str | None) -> tuple[str, ...]:
        return ("bf16", "device_events")

    def detect(self) -> Detection:
        if sys.platform != "darwin":  # torch builds MPS for macOS only
            return Detection(False, "MPS is Apple's (macOS only)")
        torch = import_torch()
        if torch is None:
            return Detection(False, "torch is not installed")
        if not torch.backends.mps.is_available():
            return Detection(False, "torch.backends.mps.is_available() is False")
        return Detection(True, "Apple MPS")

    def identity(self) -> Identity:
        torch = import_torch()
        return Identity(
            platform=self.name,
            arch=None,
            fp8=None,
            capabilities=self.capabilities(None),
            device_names=("Apple MPS",),
            device_count=1,
            runtime=str(torch.__version__),
            driver=_pyplatform.mac_ver()[0] or None,
            reason="Apple MPS",
            extra={"machine": _pyplatform.machine()},
        )

    def backend(self) -> Any | None:
        torch = loaded_torch()
        if torch is None or not torch.backends.mps.is_available():
            return None
        return torch.mps


PLATFORM = MPS()
