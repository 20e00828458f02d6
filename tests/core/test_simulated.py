"""The ``simulated`` label follows where the target computed, not only whether the platform
exists here: a result for a device platform whose tensors all lived elsewhere is simulated, and
the reason says where they lived."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from corecases import write_cases

from harness.cases import load_suite
from harness.cases.plan import build_plan
from harness.execution.aggregate import recorded_devices, simulated_reason
from harness.execution.run import Runner, RunOptions
from harness.model import Attempt, CaseResult
from harness.platforms.profile import Profile

# A stand-in for Ascend's torch_npu, which cannot be installed here: importing it gives torch
# a ``torch.npu`` whose runtime reports a device, as the real one does on an Ascend host.
FAKE_TORCH_NPU = """
import torch


class _FakeNpuRuntime:
    @staticmethod
    def is_available():
        return True

    @staticmethod
    def device_count():
        return 1


torch.npu = _FakeNpuRuntime()
"""

TARGETS = """
import numpy as np
import torch
from harness import probe


def on_cpu():
    x = torch.ones(4, 4)  # computed on the CPU whatever platform the attempt is for
    probe.fingerprint("x", x)
    probe.output("y", x * 2)


def numpy_only():
    probe.fingerprint("x", np.ones(3))
    probe.output("y", np.zeros(3))
"""


def run(project: Path, platforms: tuple[str, ...]) -> dict[tuple[str, str], CaseResult]:
    suite = load_suite([project / "cases"])
    assert not suite.errors, suite.errors
    runner = Runner(
        RunOptions(
            profile=Profile(),
            out_root=project / "reports",
            code_roots=(str(project / "code"),),
            cwd=str(project),
        )
    )
    runner.run_plan(build_plan(suite.cases, list(platforms), None))
    report = runner.finish()
    return {(c.id, c.platform): c for c in report.cases}


@pytest.mark.slow
def test_cpu_tensors_for_npu_are_simulated_with_fake_npu_runtime(project: Path) -> None:
    (project / "code" / "torch_npu.py").write_text(FAKE_TORCH_NPU)
    (project / "code" / "simtargets.py").write_text(TARGETS)
    write_cases(
        project,
        "sim.toml",
        """
        [[case]]
        id = "on-cpu"
        kind = "quant"
        target = "simtargets:on_cpu"

        [[case]]
        id = "numpy-only"
        kind = "quant"
        target = "simtargets:numpy_only"
    """,
    )
    results = run(project, ("npu", "hip"))
    npu = results[("on-cpu", "npu")]
    assert npu.status == "passed"
    # The fake runtime made npu "available": only the recorded devices tell the truth.
    assert "not available" not in (npu.reason or "")
    assert npu.simulated is True
    assert npu.reason == "simulated: npu results computed on cpu (devices recorded: cpu)"
    assert npu.attempts[0].fingerprints["x"]["device"] == "cpu"
    assert npu.attempts[0].outputs["y"]["device"] == "cpu"

    # No torch tensor recorded: the availability rule decides (npu "is" available here).
    assert results[("numpy-only", "npu")].simulated is False

    # hip is not available on this (non-ROCm) torch: simulated, and the reason says where the
    # tensors were, not that the case "ran on this machine's CPU".
    hip = results[("on-cpu", "hip")]
    assert hip.simulated is True
    assert (hip.reason or "").startswith("simulated: hip is not available here (")
    assert (hip.reason or "").endswith("; results computed on cpu (devices recorded: cpu)")
    hip_numpy = results[("numpy-only", "hip")]
    assert hip_numpy.simulated is True
    assert "recorded no torch tensor" in (hip_numpy.reason or "")


def attempt(*devices: tuple[str, str]) -> Attempt:
    """An attempt whose fingerprints lived on ``devices`` (device, framework) pairs."""
    fps: dict[str, Any] = {
        f"t{i}": {"hash": "h", "dtype": "float32", "shape": [1], "nonfinite": 0}
        | {"device": d, "framework": f}
        for i, (d, f) in enumerate(devices)
    }
    return Attempt(case_id="c", platform="p", index=0, status="passed", seed=0, fingerprints=fps)


def test_hip_on_an_nvidia_machine_says_the_tensors_were_on_cuda() -> None:
    reason = simulated_reason(
        "hip",
        "simulated: hip is not available here (this torch is not a ROCm/HIP build)",
        [attempt(("cuda:0", "torch"), ("cpu", "numpy"))],
    )
    assert reason == (
        "simulated: hip is not available here (this torch is not a ROCm/HIP build); "
        "results computed on cuda (devices recorded: cuda:0)"
    )


@pytest.mark.parametrize(
    ("platform", "devices", "simulated"),
    [
        ("cuda", [("cuda:0", "torch")], False),
        ("hip", [("cuda:0", "torch")], False),  # ROCm's torch calls its devices "cuda"
        ("cuda", [("cpu", "torch"), ("cuda:0", "torch")], False),
        ("cuda", [("cpu", "torch")], True),
        ("npu", [("cuda:0", "torch")], True),
        ("mps", [("cpu", "torch")], True),
        ("cuda", [("cpu", "numpy")], False),  # numpy says nothing about where work ran
        ("cuda", [], False),
        ("cpu", [("cpu", "torch")], False),
    ],
)
def test_available_platform_is_simulated_only_when_no_tensor_lived_on_it(
    platform: str, devices: list[tuple[str, str]], simulated: bool
) -> None:
    reason = simulated_reason(platform, None, [attempt(*devices)])
    assert (reason is not None) is simulated, reason
    if simulated:
        where = sorted({d.split(":")[0] for d, f in devices if f == "torch"})
        assert reason == (
            f"simulated: {platform} results computed on {', '.join(where)} "
            f"(devices recorded: {', '.join(recorded_devices([attempt(*devices)]))})"
        )
