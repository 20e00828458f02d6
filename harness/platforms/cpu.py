"""The CPU: always present; no device events, no device memory counter, no FP8 hardware.

Its fingerprint is the machine architecture, the processor's model name (``/proc/cpuinfo``
where there is one) and the logical CPU count, so two runner classes on different hosts differ.
"""

from __future__ import annotations

import os
import platform as _pyplatform
from pathlib import Path
from typing import Any

from harness.platforms.base import Detection, Identity, Platform


def cpu_model() -> str:
    """The processor's model name, as precise as this OS tells it."""
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model", "Hardware") and value.strip():
                return value.strip()
    except OSError:
        pass
    return _pyplatform.processor() or _pyplatform.machine() or "cpu"


class CPU(Platform):
    name = "cpu"
    default_arch = _pyplatform.machine() or None
    simulated_device_name = "CPU"

    def capabilities(self, arch: str | None) -> tuple[str, ...]:
        return ("bf16",)

    def detect(self) -> Detection:
        return Detection(True, "the CPU is always there")

    def identity(self) -> Identity:
        return Identity(
            platform="cpu",
            arch=self.default_arch,
            fp8=None,
            capabilities=self.capabilities(self.default_arch),
            device_names=(cpu_model(),),
            device_count=1,
            reason="the CPU is always there",
            extra={"logical_cpus": os.cpu_count()},
        )

    def fingerprint(self) -> dict[str, Any]:
        return {**super().fingerprint(), "os": _pyplatform.system()}


PLATFORM = CPU()
