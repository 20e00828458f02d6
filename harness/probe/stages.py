"""Stage measurement for :func:`harness.probe.stage`: synchronized wall time, device time from
device events, and peak device memory, through the attempt's platform.

The probe sits below :mod:`harness.platforms` in the import floors, so it never imports it: the
worker hands :func:`harness.probe._begin` the attempt's platform object, which this module uses
through the small :class:`StageDevice` protocol (``harness.platforms.base.Platform`` implements
it). A platform whose runtime is not loaded or not initialized answers with nothing to measure,
so a stage on the CPU, or on a simulated platform, is a plain ``perf_counter`` span.

Peak memory with nested stages: entering a stage resets the device's peak counter, so the peak
that counter held until then (``peak_before``) is first folded into every stage still open;
leaving a stage folds its peak into them too. Each stage thus reports the highest allocation
while it was open, inner stages included; a stage entered twice keeps the higher of its peaks.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Protocol


class StageDevice(Protocol):
    """What a stage needs of a platform (``harness.platforms.base.Platform`` has it).

    ``stage_start`` synchronizes and returns a mark (with ``peak_before``: the peak counter's
    value it reset, or None); ``stage_stop`` synchronizes and returns a reading with
    ``wall_s``, ``device_s`` and ``peak_bytes`` (the last two None where not measurable).
    Device errors raised by the runtime propagate: they belong to the attempt.
    """

    def stage_start(self) -> Any: ...

    def stage_stop(self, mark: Any) -> Any: ...


@dataclass
class StageBook:
    """Per-attempt stage records, filled by :class:`StageTimer`."""

    device: StageDevice | None = None
    stages: dict[str, float] = field(default_factory=dict)
    device_s: dict[str, float] = field(default_factory=dict)
    memory: dict[str, int] = field(default_factory=dict)
    open: list[str] = field(default_factory=list)

    def fold_peak(self, peak: int | None) -> None:
        if peak is None:
            return
        for name in self.open:
            self.memory[name] = max(self.memory.get(name, 0), int(peak))


class StageTimer:
    """Time the body as stage ``name`` of ``book``; see the module docstring.

    A plain class rather than a generator: a stage opens and closes around every hooked module
    call and denoising step, and the generator protocol cost three times as much per stage.
    """

    __slots__ = ("book", "mark", "name", "start")

    def __init__(self, book: StageBook, name: str) -> None:
        self.book = book
        self.name = name

    def __enter__(self) -> None:
        book = self.book
        # Claim the slot on entry so stages are listed in the order they started, outer first.
        book.stages.setdefault(self.name, 0.0)
        dev = book.device
        self.start = time.perf_counter()
        self.mark = dev.stage_start() if dev is not None else None
        if self.mark is not None:
            book.fold_peak(getattr(self.mark, "peak_before", None))
        book.open.append(self.name)

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        book = self.book
        dev = book.device
        reading: Any = None
        try:
            if dev is not None:
                if exc_type is None:
                    reading = dev.stage_stop(self.mark)  # a device fault here propagates
                else:
                    # The body's exception is the attempt's error; a device error while
                    # reading the stage after it would only hide it.
                    try:
                        reading = dev.stage_stop(self.mark)
                    except Exception:
                        reading = None
        finally:
            wall = getattr(reading, "wall_s", None)
            name = self.name
            book.stages[name] += wall if wall is not None else time.perf_counter() - self.start
            if reading is not None:
                device_s = getattr(reading, "device_s", None)
                if device_s is not None:
                    book.device_s[name] = book.device_s.get(name, 0.0) + float(device_s)
                book.fold_peak(getattr(reading, "peak_bytes", None))
            book.open.pop()
