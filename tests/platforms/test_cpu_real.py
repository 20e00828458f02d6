"""The real behaviour on this CPU machine: only the CPU is there, every other platform says
why not and presents its simulated identity, and stages measure wall time alone."""

from __future__ import annotations

from pathlib import Path

import torch

from harness import platforms, probe
from harness.platforms.devices import count_devices, count_here

HAS_CUDA = torch.cuda.is_available()


def test_the_cpu_is_always_available_with_its_fingerprint() -> None:
    assert "cpu" in platforms.available()
    ident = platforms.resolve_identity("cpu")
    assert ident.simulated is False and ident.device_count == 1
    fp = platforms.fingerprints()["cpu"]
    assert fp["arch"] == ident.arch and fp["logical_cpus"] and fp["device_names"]


def test_every_platform_not_here_says_why_and_presents_its_simulated_identity() -> None:
    for s in platforms.statuses():
        if s.available:
            continue
        assert s.reason, s.name
        assert s.identity.simulated and s.identity.reason.startswith(
            f"simulated: {s.name} is not available here ({s.reason})"
        )
        assert platforms.why_not(s.name) == s.reason


def test_cpu_has_no_device_runtime_to_measure_through() -> None:
    cpu = platforms.get("cpu")
    assert cpu.backend() is None and cpu.synchronize() is False
    if not HAS_CUDA:
        assert platforms.get("cuda").backend() is None
        assert platforms.get("cuda").synchronize() is False


def test_a_cpu_stage_records_wall_time_and_no_device_figures(tmp_path: Path) -> None:
    rec = probe._begin(0, "cpu", tmp_path, device=platforms.get("cpu"))
    try:
        with probe.stage("work"):
            torch.ones(64, 64) @ torch.ones(64, 64)
    finally:
        probe._end()
    assert rec.stages["work"] > 0
    assert rec.stage_device == {} and rec.stage_memory == {}


def test_an_attempt_on_the_cpu_times_stages_by_wall_clock_alone_device_platforms_through_it(
    tmp_path: Path,
) -> None:
    from harness.worker.attempt import stage_device

    assert stage_device("cpu") is None  # no runtime it could ever measure through
    assert stage_device("cuda") is platforms.get("cuda")  # acts once its runtime is initialized
    assert stage_device("no-such-platform") is None
    rec = probe._begin(0, "cpu", tmp_path, device=stage_device("cpu"))
    try:
        with probe.stage("work"):
            torch.ones(64, 64) @ torch.ones(64, 64)
    finally:
        probe._end()
    assert rec.stages["work"] > 0 and rec.stage_device == {} and rec.stage_memory == {}


def test_device_count_in_a_fresh_unpinned_interpreter_agrees_with_this_process() -> None:
    here, there = count_here("cpu"), count_devices("cpu")
    assert (there.available, there.count) == (here.available, here.count) == (True, 1)
    cuda = count_devices("cuda", env={"CUDA_VISIBLE_DEVICES": "", **_path_env()})
    assert cuda.available is HAS_CUDA


def _path_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
