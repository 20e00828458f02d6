"""tinyav decides from the harness's platform identity (probe.platform_info()), simulated or
real: int_mm only with the int8_mm capability on CUDA, the fused gate only with fused_kernels,
the FP8 flavour from the identity's fp8; what executes follows the device in hand. Standalone
(no harness) platform_info() is None and tinyav decides as before."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bareenv import bare_env
from tinyav import dispatch
from tinyav.scenarios import pipeline as pipeline_scenarios

from harness import probe
from harness.platforms import get

TARGET = Path(__file__).resolve().parents[2] / "targets" / "tinyav"


def identity(platform: str, arch: str | None = None) -> dict[str, Any]:
    return get(platform).simulated_identity(arch).to_json()


@pytest.fixture
def attempt_as(tmp_path: Path) -> Iterator[Any]:
    """Start an attempt that runs as a given identity; ended afterwards."""

    def begin(info: dict[str, Any] | None, platform: str) -> Any:
        return probe._begin(7, platform, tmp_path / "out", info=info)

    try:
        yield begin
    finally:
        probe._end()


def test_plan_follows_capabilities_not_only_the_name() -> None:
    assert dispatch.plan("cuda", ("int8_mm", "fused_kernels")).int8_mm == "int_mm"
    assert dispatch.plan("cuda", ("int8_mm", "fused_kernels")).residual_gate == "fused_cuda"
    # An old CUDA arch without integer matmul (sm_70): dequantize instead.
    assert dispatch.plan("cuda", get("cuda").capabilities("sm_70")).int8_mm == "dequant_matmul"
    no_fusion = dispatch.plan("cuda", ("int8_mm",))
    assert no_fusion.residual_gate == "eager"
    # Whatever a HIP identity lists, CUDA-only paths stay on CUDA.
    hip = dispatch.plan("hip", ("int8_mm", "fused_kernels"))
    assert (hip.int8_mm, hip.residual_gate) == ("dequant_matmul", "eager")


def test_identity_for_is_the_attempts_own_platform_only(attempt_as: Any) -> None:
    assert dispatch.identity_for("hip") is None  # outside an attempt
    attempt_as(identity("hip", "gfx950"), "hip")
    info = dispatch.identity_for("hip")
    assert info is not None and info["arch"] == "gfx950" and info["fp8"] == "e4m3fn"
    assert dispatch.identity_for("cuda") is None  # a case asking about another platform


@pytest.mark.slow
def test_simulated_cuda_plans_cuda_paths_and_executes_the_cpu_ones(attempt_as: Any) -> None:
    rec = attempt_as(identity("cuda"), "cuda")
    pipeline_scenarios.t2va(quant="int8", steps=1, num_frames=8, height=32, width=32)
    notes = rec.notes
    assert notes["dispatch.int8_mm.plan"] == "int_mm"
    assert notes["dispatch.residual_gate.plan"] == "fused_cuda"
    assert notes["dispatch.int8_mm.ran"] == "dequant_matmul"  # CPU tensors: int_mm fell back
    assert notes["dispatch.residual_gate.ran"] == "eager"  # the fused kernel cannot run here
    assert notes["device.ran"] == "cpu"
    assert notes["platform.simulated"] is True and notes["platform.arch"] == "sm_90"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("arch", "flavour"), [("gfx942", "float8_e4m3fnuz"), ("gfx950", "float8_e4m3fn")]
)
def test_hip_fp8_flavour_follows_the_identitys_arch(
    attempt_as: Any, arch: str, flavour: str
) -> None:
    rec = attempt_as(identity("hip", arch), "hip")
    pipeline_scenarios.t2va(quant="fp8", steps=1, num_frames=8, height=32, width=32)
    assert rec.notes["fp8.flavour"] == flavour
    assert rec.notes["dispatch.residual_gate.plan"] == "eager"  # no fused kernels on HIP


def test_standalone_tinyav_has_no_platform_info_and_still_plans() -> None:
    code = (
        "import sys; sys.modules['harness'] = None\n"  # no harness importable
        "from tinyav._probe import probe\n"
        "from tinyav import dispatch\n"
        "assert probe.platform_info() is None\n"
        "assert dispatch.identity_for('cuda') is None\n"
        "print(dispatch.plan('cpu').int8_mm, dispatch.plan('hip').residual_gate)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=TARGET,
        env=bare_env(PYTHONPATH=str(TARGET)),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["dequant_matmul", "eager"]
