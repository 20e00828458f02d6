"""Stage measurement for :func:`harness.probe.stage`: synchronized wall time, device time from
device events, and peak device memory, through the attempt's platform.

The probe sits below :mod:`harness.platforms` in the import floors, so it never imports it: the
worker hands :func:`harness.probe._begin` the attempt's platform object, which this module uses
through the small :class:`StageDevice` protocol (``harness.platforms.base.Platform`` implements
it). A platform whose runtime is not loaded or not initialized answers with nothing to measure,
so a stage on the CPU, or on a simulated platform, is a plain ``perf_counter`` span.

Beside wall time each stage records the process's CPU seconds (``stage_cpu``) and, on Linux,
its run-queue delay (``stage_wait``: seconds its threads were runnable but not running, other
processes' load; :mod:`harness.probe.sched` says how threads combine), so a budget can judge
wall time less that delay. Every clock is the harness's own (:mod:`harness.probe.clocks`): a
target that replaces ``time.perf_counter`` does not change what a stage reads.

A stage still open when the attempt ends (entered and never left) has no time: the worker
makes that attempt an error naming it (:meth:`StageBook.close`), never a 0.0 s stage.

Peak memory with nested stages: entering a stage resets the device's peak counter, so the peak
that counter held until then (``peak_before``) is first folded into every stage still open;
leaving a stage folds its peak into them too. Each stage thus reports the highest allocation
while it was open, inner stages included; a stage entered twice keeps the higher of its peaks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from harness.probe.clocks import perf_counter, process_time
from harness.probe.sched import CLOCKS, Sample


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
    cpu_s: dict[str, float] = field(default_factory=dict)
    wait_s: dict[str, float] = field(default_factory=dict)
    open: list[str] = field(default_factory=list)
    closed: bool = False

    def close(self) -> list[str]:
        """End the book (the attempt is over): the stages still open, innermost last, are
        returned and taken out of the records (they have no time); a stage that leaves
        after this records nothing."""
        self.closed = True
        unclosed = list(self.open)
        for name in set(unclosed):
            for records in (self.stages, self.device_s, self.memory, self.cpu_s, self.wait_s):
                records.pop(name, None)
        self.open.clear()
        return unclosed

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

    __slots__ = ("book", "cpu", "mark", "name", "start", "threads")

    def __init__(self, book: StageBook, name: str) -> None:
        self.book = book
        self.name = name

    def __enter__(self) -> None:
        book = self.book
        # Claim the slot on entry so stages are listed in the order they started, outer first.
        book.stages.setdefault(self.name, 0.0)
        dev = book.device
        self.threads: Sample = CLOCKS.sample()
        self.cpu = process_time()
        self.start = perf_counter()
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
            if wall is None:
                wall = perf_counter() - self.start
            cpu = process_time() - self.cpu
            if not book.closed:
                self._record(reading, wall, cpu)

    def _record(self, reading: Any, wall: float, cpu: float) -> None:
        book = self.book
        name = self.name
        book.stages[name] += wall
        book.cpu_s[name] = book.cpu_s.get(name, 0.0) + cpu
        if CLOCKS.available:
            wait = CLOCKS.finish(self.threads, cpu, wall)
            book.wait_s[name] = book.wait_s.get(name, 0.0) + wait
        if reading is not None:
            device_s = getattr(reading, "device_s", None)
            if device_s is not None:
                book.device_s[name] = book.device_s.get(name, 0.0) + float(device_s)
            book.fold_peak(getattr(reading, "peak_bytes", None))
        # This stage's own entry: the last one of its name (another thread's stage may have
        # opened since).
        opened = book.open
        for i in range(len(opened) - 1, -1, -1):
            if opened[i] == name:
                del opened[i]
                break
