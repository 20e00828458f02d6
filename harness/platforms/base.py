"""The one interface every platform module implements, and the identity a platform presents.

A platform module (``cpu``, ``cuda``, ``hip``, ``npu``, ``xpu``, ``mps``, or a third-party one
through the ``harness.platforms`` entry point) subclasses :class:`Platform`. Two halves:

* **pure data** about the platform, valid with or without its runtime: the architecture a
  simulated run presents (``default_arch``), the FP8 flavour and capabilities of an
  architecture, the environment variable that pins devices. These are what a simulated run
  shows the harness and the target, so policy paths and dispatch decisions are exercised on a
  CPU.
* **runtime** methods that talk to the device (detection, synchronize, device-event timing,
  peak memory, fingerprint). They import torch (or the vendor module) lazily, never at import
  time, and are only meaningful when :meth:`Platform.detect` says the platform is there.

:class:`Identity` is what an attempt runs as: real when detected, otherwise simulated with the
reason. It crosses the worker protocol as JSON and is recorded in report.json.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from harness.probe.clocks import perf_counter

FP8Flavour = Literal["e4m3fn", "e4m3fnuz"]

# The capability vocabulary a target may ask about (``probe.platform_info()["capabilities"]``).
CAPABILITIES: tuple[str, ...] = (
    "int8_mm",  # an integer matmul kernel (torch._int_mm) for INT8 weights and activations
    "fused_kernels",  # the vendor's fused elementwise kernels (e.g. tinyav's fused residual gate)
    "fp8",  # FP8 matmul in hardware (the flavour is Identity.fp8)
    "bf16",  # bfloat16 compute
    "device_events",  # device-side timing events for stage latency
    "peak_memory",  # a peak allocated device memory counter
)


@dataclass(frozen=True)
class Detection:
    """Whether a platform is really present here, and a one-line reason either way."""

    available: bool
    reason: str


@dataclass(frozen=True)
class Identity:
    """The platform an attempt runs as, as the harness and the target see it."""

    platform: str
    arch: str | None
    fp8: FP8Flavour | None
    capabilities: tuple[str, ...]
    device_names: tuple[str, ...] = ()
    device_count: int = 0
    driver: str | None = None
    runtime: str | None = None
    simulated: bool = False
    reason: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)  # memory, clocks, ... where readable

    def has(self, capability: str) -> bool:
        return capability in self.capabilities

    def to_json(self) -> dict[str, Any]:
        return {
            "platform": self.platform,
            "arch": self.arch,
            "fp8": self.fp8,
            "capabilities": list(self.capabilities),
            "device_names": list(self.device_names),
            "device_count": self.device_count,
            "driver": self.driver,
            "runtime": self.runtime,
            "simulated": self.simulated,
            "reason": self.reason,
            "extra": dict(self.extra),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Identity:
        return cls(
            platform=d["platform"],
            arch=d.get("arch"),
            fp8=d.get("fp8"),
            capabilities=tuple(d.get("capabilities", ())),
            device_names=tuple(d.get("device_names", ())),
            device_count=int(d.get("device_count", 0)),
            driver=d.get("driver"),
            runtime=d.get("runtime"),
            simulated=bool(d.get("simulated", False)),
            reason=d.get("reason", ""),
            extra=dict(d.get("extra", {})),
        )


class Platform:
    """Base class of a platform module's ``PLATFORM`` object; subclasses override what differs."""

    name: str = ""
    # The architecture a simulated run of this platform presents when the profile names none.
    default_arch: str | None = None
    # The device name a simulated run presents.
    simulated_device_name: str = ""
    # The environment variable that restricts which devices a process sees, if any.
    visible_devices_env: str | None = None

    # --- pure data: valid without the runtime ---------------------------------------------

    def fp8_flavour(self, arch: str | None) -> FP8Flavour | None:
        """The FP8 format ``arch`` computes in, or None when it has no FP8 hardware."""
        return None

    def capabilities(self, arch: str | None) -> tuple[str, ...]:
        """The capabilities (from :data:`CAPABILITIES`) of ``arch``, sorted."""
        return ()

    def simulated_identity(self, arch: str | None = None, *, reason: str = "") -> Identity:
        """The identity a simulated run presents: this platform's data for ``arch``."""
        a = arch if arch is not None else self.default_arch
        name = self.simulated_device_name or self.name
        return Identity(
            platform=self.name,
            arch=a,
            fp8=self.fp8_flavour(a),
            capabilities=self.capabilities(a),
            device_names=(f"{name} (simulated)",),
            device_count=1,
            simulated=True,
            reason=reason or f"simulated: {self.name} is not available here",
        )

    # --- runtime: only when detect() says the platform is there ---------------------------

    def detect(self) -> Detection:
        """Whether this platform is really present (imports its runtime lazily)."""
        raise NotImplementedError

    def identity(self) -> Identity:
        """The real identity of this machine's devices (call only when detected)."""
        raise NotImplementedError

    def device_count(self) -> int:
        """How many devices of this platform this process sees (0 when it is not there)."""
        return self.identity().device_count if self.detect().available else 0

    def fingerprint(self) -> dict[str, Any]:
        """What tells this runner's devices from another's: driver, runtime, architecture,
        device names, total memory, multiprocessor count and clocks where readable. The
        default is the identity's own fields; platforms add what their runtime exposes."""
        ident = self.identity()
        return {
            "platform": ident.platform,
            "arch": ident.arch,
            "driver": ident.driver,
            "runtime": ident.runtime,
            "device_names": list(ident.device_names),
            "device_count": ident.device_count,
            **dict(ident.extra),
        }

    # --- the stage probe: synchronize, device-event timing, peak memory ------------------
    # ``probe.stage`` calls these through :class:`StageDevice`. None of them imports anything:
    # they act only when this platform's runtime is already loaded *and* its device is
    # initialized in this process, so a simulated platform (whose runtime is absent) and a
    # target that never touched the device cost nothing.

    def backend(self) -> Any | None:
        """The initialized device module (``torch.cuda``, ``torch.npu``, ...) of this process,
        or None when this platform's runtime is not loaded or its device not initialized."""
        return None

    def synchronize(self) -> bool:
        """Wait for the device's queued work. False when there is nothing to synchronize
        (runtime not loaded, device not initialized); a device error raised by the runtime
        (where an asynchronous fault surfaces) propagates to the caller."""
        be = self.backend()
        if be is None:
            return False
        be.synchronize()
        return True

    def stage_start(self) -> StageMark:
        """Synchronize, reset the peak-memory counter and start the stage's clocks."""
        be = self.backend()
        if be is not None:
            be.synchronize()
        mark = StageMark(backend=be, wall_start=perf_counter())
        if be is None:
            return mark
        if self.has_peak_memory:
            mark.peak_before = int(be.max_memory_allocated())
            be.reset_peak_memory_stats()
        event = getattr(be, "Event", None)
        if self.has_device_events and event is not None:
            mark.start_event = event(enable_timing=True)
            mark.start_event.record()
        return mark

    def stage_stop(self, mark: StageMark) -> StageReading:
        """Synchronize and read the stage: wall seconds, device seconds (device events) and
        peak allocated device bytes since :meth:`stage_start`; None where not measurable."""
        be = mark.backend
        if be is None:
            be = self.backend()  # the target initialized the device inside the stage
            if be is not None:
                be.synchronize()
            return StageReading(perf_counter() - mark.wall_start, None, self._peak(be))
        end = None
        if mark.start_event is not None:
            end = be.Event(enable_timing=True)
            end.record()
        be.synchronize()
        wall = perf_counter() - mark.wall_start
        device = None
        if end is not None and mark.start_event is not None:
            device = float(mark.start_event.elapsed_time(end)) / 1000.0
        return StageReading(wall, device, self._peak(be))

    def _peak(self, be: Any | None) -> int | None:
        if be is None or not self.has_peak_memory:
            return None
        return int(be.max_memory_allocated())

    # Whether the backend module has device events / a peak-memory counter.
    has_device_events: bool = False
    has_peak_memory: bool = False


@dataclass
class StageMark:
    """What :meth:`Platform.stage_start` handed out, for :meth:`Platform.stage_stop`."""

    backend: Any | None
    wall_start: float
    start_event: Any | None = None
    peak_before: int | None = None  # the counter's value before the reset (an outer stage's)


@dataclass(frozen=True)
class StageReading:
    """One stage's measurement: synchronized wall seconds, device-event seconds (None without
    device events) and peak allocated device bytes (None without a counter)."""

    wall_s: float
    device_s: float | None
    peak_bytes: int | None


def loaded_torch() -> Any | None:
    """torch when this process already imported it, else None (never imports it)."""
    return sys.modules.get("torch")
