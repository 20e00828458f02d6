"""Device pinning of real worker processes, and the profile's device_count checked against
the machine. Each case notes the pinning variables it really sees (``os.environ``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from platcases import fake_cuda_torch, write_fake_torch

from harness.cases import load_suite
from harness.cases.plan import PlanItem, build_plan
from harness.errors import ProfileError
from harness.execution.executor import Executor
from harness.execution.run import Runner, RunOptions
from harness.execution.workers import SideSpec
from harness.model import Side
from harness.platforms import get
from harness.platforms.devices import device_slot, pin_env
from harness.platforms.profile import Profile

TARGET = """
import os
from harness import probe

VARS = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "HARNESS_DEVICES")


def env():
    for var in VARS:
        probe.note(var, os.environ.get(var, "unset"))
    probe.note("pid", os.getpid())
"""

CASE = 'id = "pin"\nkind = "quant"\ntarget = "pinmod:env"\ntimeout_s = 60\n'


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "pinmod.py").write_text(TARGET)
    (tmp_path / "cases").mkdir()
    (tmp_path / "cases" / "pin.toml").write_text(CASE)
    # This test may itself run in a pytest-xdist worker, or under a pinned CI job.
    for var in ("PYTEST_XDIST_WORKER", "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path


def items(project: Path, platform: str) -> list[PlanItem]:
    suite = load_suite([project / "cases"])
    assert not suite.errors, suite.errors
    return build_plan(suite.cases, [platform])


def profile(project: Path, platform: str = "cuda", device_count: int = 2) -> Profile:
    return Profile(
        name="multi",
        platform=platform,
        device_count=device_count,
        source=str(project / "multi.toml"),
    )


def notes_per_side(
    project: Path, prof: Profile, platform: str = "cuda", attempts: int = 1
) -> dict[Side, list[dict[str, object]]]:
    code = (str(project / "code"),)
    sides: dict[Side, SideSpec] = {
        "base": SideSpec("base", code, cwd=str(project)),
        "head": SideSpec("head", code, cwd=str(project)),
    }
    ex = Executor(run_dir=project / "run", profile=prof, sides=sides, preimport=("numpy",))
    (item,) = items(project, platform)
    out: dict[Side, list[dict[str, object]]] = {"base": [], "head": []}
    try:
        for i in range(attempts):
            for side in ("base", "head"):
                a, _ = ex.run_job(side, item, index=i, repeat=i, retry=0, warmup=False)
                assert a.status == "passed", a.error
                out[side].append(dict(a.notes))
    finally:
        ex.close()
    return out


@pytest.mark.slow
def test_each_persistent_worker_is_pinned_and_base_and_head_share_one_device(
    project: Path,
) -> None:
    # a same-runner comparison must not add device-to-device variance: both sides' workers
    # are pinned to the one device of their platform (they never run at the same time)
    notes = notes_per_side(project, profile(project), attempts=2)
    assert [n["CUDA_VISIBLE_DEVICES"] for n in notes["base"]] == ["0", "0"]
    assert [n["CUDA_VISIBLE_DEVICES"] for n in notes["head"]] == ["0", "0"]
    assert notes["head"][0]["HARNESS_DEVICES"] == "0"
    # the same persistent worker served both attempts of a side
    assert notes["base"][0]["pid"] == notes["base"][1]["pid"] != notes["head"][0]["pid"]


@pytest.mark.slow
def test_pytest_xdist_worker_n_owns_device_n_mod_count(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw3")
    notes = notes_per_side(project, profile(project))
    assert notes["base"][0]["CUDA_VISIBLE_DEVICES"] == "1"  # 3 mod 2
    assert notes["head"][0]["CUDA_VISIBLE_DEVICES"] == "1"


@pytest.mark.slow
def test_pins_are_taken_within_the_set_the_manager_was_given(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "5,7")
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")  # device 1 of the manager's set {5, 7}
    notes = notes_per_side(project, profile(project, "hip"), platform="hip")
    assert notes["base"][0]["HIP_VISIBLE_DEVICES"] == "7"
    assert notes["head"][0]["HIP_VISIBLE_DEVICES"] == "7"
    assert notes["base"][0]["CUDA_VISIBLE_DEVICES"] == "unset"


@pytest.mark.slow
def test_no_pin_without_a_device_count_or_off_the_profiles_platform(project: Path) -> None:
    for prof, platform in ((profile(project, "cuda", 0), "cuda"), (profile(project), "hip")):
        notes = notes_per_side(project, prof, platform=platform)
        for side in ("base", "head"):
            n = notes[side][0]
            assert (n["CUDA_VISIBLE_DEVICES"], n["HIP_VISIBLE_DEVICES"]) == ("unset", "unset")


def test_a_worker_can_be_pinned_to_a_set_of_devices() -> None:
    assert pin_env(get("npu"), (0, 1, 2), {}) == {
        "ASCEND_RT_VISIBLE_DEVICES": "0,1,2",
        "HARNESS_DEVICES": "0,1,2",
    }
    assert pin_env(get("xpu"), (1,), {}) == {"ZE_AFFINITY_MASK": "1", "HARNESS_DEVICES": "1"}
    assert pin_env(get("cuda"), (0, 1), {"CUDA_VISIBLE_DEVICES": "4,6"})["HARNESS_DEVICES"] == (
        "4,6"
    )
    assert pin_env(get("cpu"), (0,), {}) == {}  # the CPU has no pinning variable
    assert device_slot(5, 4, {}) == 1 and device_slot(0, 0, {}) is None


def run(project: Path, prof: Profile) -> Runner:
    runner = Runner(
        RunOptions(
            profile=prof,
            out_root=project / "reports",
            code_roots=(str(project / "code"),),
            cwd=str(project),
            preimport=("numpy",),
        )
    )
    return runner


@pytest.mark.slow
def test_device_count_of_a_simulated_platform_is_not_checked_and_says_so(project: Path) -> None:
    said: list[str] = []
    runner = run(project, profile(project))
    runner._say = said.append  # type: ignore[method-assign]
    runner.executor.say = said.append
    runner.run_plan(items(project, "cuda"))
    report = runner.finish()
    (case,) = report.cases
    assert case.status == "passed" and case.simulated
    msg = f"{project / 'multi.toml'}: device_count = 2 not checked: cuda is simulated here ("
    assert any(line.startswith(msg) for line in said), said
    assignment = report.env["device_assignment"]
    assert assignment["device_count"] == 2 and assignment["check"].startswith(msg)
    assert assignment["pinned"] == {"cuda": "0"}


def test_fewer_devices_than_the_profile_is_a_profile_error_with_a_stand_in_cuda_runtime(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The device count is read in a fresh interpreter whose torch is a stand-in (1 H100).
    write_fake_torch(project / "code")
    monkeypatch.setenv("FAKE_TORCH", json.dumps(fake_cuda_torch(n=1)))
    runner = run(project, profile(project, "cuda", 4))
    with pytest.raises(ProfileError) as err:
        runner.run_plan(items(project, "cuda"))
    runner.finish()
    assert str(err.value) == (
        f"{project / 'multi.toml'}: key 'device_count' = 4: this machine has only 1 cuda "
        "device(s) (NVIDIA H100 80GB HBM3); lower device_count or run on a runner with 4"
    )
    assert runner.all_attempts == []  # refused before any work
