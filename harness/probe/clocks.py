"""The harness's own clocks, bound once when the harness is imported.

A target that replaces ``time.perf_counter`` (or ``time.process_time``) in the ``time`` module
changes what its own code reads, never what the harness measures: stages, attempt durations
and device-stage wall times all read these names, which keep the functions the interpreter
started with. The worker imports the harness before any target.
"""

from __future__ import annotations

from time import perf_counter, process_time

__all__ = ["perf_counter", "process_time"]
