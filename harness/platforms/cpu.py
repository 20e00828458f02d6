"""The CPU: always present; no device events, no device memory counter, no FP8 hardware."""

from __future__ import annotations

import platform as _pyplatform

from harness.platforms.base import Detection, Identity, Platform


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
            device_names=(_pyplatform.processor() or _pyplatform.machine() or "cpu",),
            device_count=1,
            reason="the CPU is always there",
        )


PLATFORM = CPU()
