"""Stage clocks: each stage records the process's CPU seconds and, on Linux, its run-queue
delay (from ``/proc/self/task/<tid>/schedstat``) beside wall seconds, and each attempt its
whole run-queue delay; the harness's clocks are its own (a target that replaces
``time.perf_counter`` changes nothing the harness measures); a stage entered and never left
is an error, not 0.0 s.

Contention is made, not hoped for: the test's thread and a busy process are pinned to the
same CPU (``os.sched_setaffinity``), so the stage's thread must wait for it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from corecases import by_id, run_suite, write_cases

from harness import probe
from harness.probe.sched import CLOCKS, ThreadClocks

LINUX = pytest.mark.skipif(
    not CLOCKS.available, reason="needs /proc/self/task/<tid>/schedstat (Linux)"
)

CLOCKMOD = """
import os, subprocess, sys, time
from harness import probe


def spin(cpu_s=0.1):
    # A busy process on the worker's CPU (the test pinned the worker to one).
    cpu = min(os.sched_getaffinity(0))
    code = f"import os\\nos.sched_setaffinity(0, {{{cpu}}})\\nwhile 1: pass"
    hog = subprocess.Popen([sys.executable, "-c", code])
    try:
        time.sleep(0.2)
        with probe.stage("spin"):
            end = time.process_time() + cpu_s
            while time.process_time() < end:
                pass
    finally:
        hog.kill()
        hog.wait()


def fake_clock():
    real = time.perf_counter
    time.perf_counter = lambda: 0.0  # a target's own clock, frozen
    try:
        with probe.stage("after"):
            time.sleep(0.01)
    finally:
        time.perf_counter = real


def unclosed():
    probe.stage("Open").__enter__()
    with probe.stage("closed"):
        pass
"""


def spin(cpu_s: float) -> None:
    """Burn ``cpu_s`` seconds of this process's CPU time, however long that takes."""
    end = time.process_time() + cpu_s
    while time.process_time() < end:
        pass


@contextmanager
def one_cpu() -> Iterator[int]:
    """Pin this thread (and the processes it starts from now on) to one CPU."""
    before = os.sched_getaffinity(0)
    cpu = min(before)
    os.sched_setaffinity(0, {cpu})
    try:
        yield cpu
    finally:
        os.sched_setaffinity(0, before)


@contextmanager
def hog_on_my_cpu() -> Iterator[None]:
    """Pin this thread (and the processes it starts) and a busy process to one CPU."""
    with one_cpu() as cpu:
        code = f"import os\nos.sched_setaffinity(0, {{{cpu}}})\nwhile 1: pass"
        hog = subprocess.Popen([sys.executable, "-c", code])
        try:
            time.sleep(0.2)  # let it start spinning
            yield
        finally:
            hog.kill()
            hog.wait()


@LINUX
def test_a_stage_records_cpu_seconds_and_run_queue_delay(rec: Any) -> None:
    with probe.stage("work"):
        spin(0.02)
    wall, cpu, wait = rec.stages["work"], rec.stage_cpu["work"], rec.stage_wait["work"]
    assert cpu > 0 and 0 <= wait <= wall


@LINUX
def test_a_busy_process_on_the_stages_cpu_shows_as_run_queue_delay(rec: Any) -> None:
    with hog_on_my_cpu(), probe.stage("work"):
        spin(0.1)
    wall, wait = rec.stages["work"], rec.stage_wait["work"]
    assert wait > 0
    assert 0 < wall - wait <= wall


@LINUX
def test_a_thread_that_started_inside_a_span_is_read_at_its_end() -> None:
    clocks = ThreadClocks()
    before = clocks.sample(relist=True)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    stop = threading.Event()
    busy = threading.Thread(target=lambda: [None for _ in iter(stop.is_set, True)])
    with hog_on_my_cpu():  # the new thread inherits this thread's CPU
        busy.start()
        time.sleep(0.1)
        assert busy.native_id not in clocks.threads()
        wait = clocks.finish(before, time.process_time() - cpu0, time.perf_counter() - wall0)
        stop.set()
        busy.join()
    # Its CPU time was not the known threads': the threads were listed again and it was read.
    assert busy.native_id in clocks.threads() and busy.native_id not in before
    assert 0 < wait <= time.perf_counter() - wall0


def test_a_target_replacing_perf_counter_does_not_change_stage_timing(
    rec: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(time, "perf_counter", lambda: 0.0)
    with probe.stage("after"):
        time.sleep(0.01)
    assert rec.stages["after"] > 0


@LINUX
@pytest.mark.slow
def test_in_a_worker_delays_are_recorded_clocks_are_its_own_and_open_stages_fail(
    project: Path,
) -> None:
    (project / "code" / "clockmod.py").write_text(CLOCKMOD)
    write_cases(
        project,
        "clocks.toml",
        """
        [[case]]
        id = "spin"
        kind = "pipeline"
        target = "clockmod:spin"
        retries = 0

        [[case]]
        id = "fake-clock"
        kind = "pipeline"
        target = "clockmod:fake_clock"
        retries = 0

        [[case]]
        id = "unclosed"
        kind = "pipeline"
        target = "clockmod:unclosed"
        retries = 0
        """,
    )
    with one_cpu():  # the worker starts from this thread: on that CPU, where spin's hog runs
        report, _ = run_suite(project)
    cases = by_id(report)
    [spun] = cases["spin"].attempts  # type: ignore[attr-defined]
    assert spun.status == "passed", spun.error
    assert spun.stage_cpu["spin"] > 0
    assert 0 < spun.stage_wait["spin"] <= spun.stages["spin"]
    assert 0 < spun.wait_s <= spun.duration_s
    # The target froze time.perf_counter: the harness's clocks are not that one.
    [fake] = cases["fake-clock"].attempts  # type: ignore[attr-defined]
    assert fake.status == "passed" and fake.stages["after"] > 0 and fake.duration_s > 0
    # A stage entered and never left: an error naming it, not a 0.0 s stage.
    [open_] = cases["unclosed"].attempts  # type: ignore[attr-defined]
    assert open_.status == "error" and open_.error.type == "UnclosedStage"
    assert "'Open'" in open_.error.message
    assert "Open" not in open_.stages and "closed" in open_.stages


def test_an_unclosed_stage_has_no_time_and_is_named_when_the_attempt_ends() -> None:
    rec = probe._begin(seed=1, platform="cpu", output_dir=None)
    try:
        probe.stage("Open").__enter__()
        with probe.stage("closed"):
            pass
    finally:
        probe._end()
    assert rec.unclosed == ("Open",)
    assert "Open" not in rec.stages and "closed" in rec.stages
