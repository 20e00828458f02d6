"""Dispatch decisions per platform, reported through the probe; fused path stays on CUDA."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from tinyav import dispatch
from tinyav.errors import DispatchError
from tinyav.scenarios import quant as quant_scenarios

EXPECTED = {
    "cpu": ("dequant_matmul", "eager"),
    "cuda": ("int_mm", "fused_cuda"),
    "hip": ("dequant_matmul", "eager"),
    "npu": ("dequant_matmul", "eager"),
    "xpu": ("dequant_matmul", "eager"),
    "mps": ("dequant_matmul", "eager"),
}


@pytest.mark.parametrize("platform", sorted(EXPECTED))
def test_plan_per_platform(platform: str, recorder: Any) -> None:
    mm, gate = EXPECTED[platform]
    quant_scenarios.dispatch_path(platform, mm, gate)
    assert recorder.notes["dispatch.int8_mm"] == mm
    assert recorder.notes["dispatch.residual_gate"] == gate


def test_wrong_expectation_fails() -> None:
    with pytest.raises(AssertionError, match="gate=eager"):
        quant_scenarios.dispatch_path("hip", expect_residual_gate="fused_cuda")


def test_unknown_platform() -> None:
    with pytest.raises(DispatchError, match="unknown platform 'tpu'"):
        dispatch.plan("tpu")


def test_fused_gate_refuses_non_cuda_tensors() -> None:
    x = torch.ones(2, 3)
    with pytest.raises(DispatchError, match="CUDA-only"):
        dispatch.fused_residual_gate(x, x, x)


def test_hip_tensors_are_not_cuda_with_simulated_rocm_build(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A ROCm build reports device.type == "cuda"; torch.version.hip tells them apart.
    class FakeDevice:
        type = "cuda"

    class FakeTensor:
        device = FakeDevice()

    monkeypatch.setattr(torch.version, "hip", "6.2", raising=False)
    assert dispatch.tensor_platform(FakeTensor()) == "hip"  # type: ignore[arg-type]
    monkeypatch.setattr(torch.version, "hip", None, raising=False)
    assert dispatch.tensor_platform(FakeTensor()) == "cuda"  # type: ignore[arg-type]


def test_apply_sets_paths(tmp_path: Any) -> None:
    from tinyav.checkpoint import write_checkpoint
    from tinyav.loader import load_dit

    model = load_dit(write_checkpoint(tmp_path / "q.safetensors", "int8_convrot"))
    dispatch.apply(model, dispatch.plan("hip"))
    assert model.blocks[0].attn.qkv_proj.mm_path == "dequant_matmul"
    assert model.blocks[0].residual_gate is dispatch.eager_residual_gate
    dispatch.apply(model, dispatch.plan("cuda"))
    assert model.blocks[0].attn.qkv_proj.mm_path == "int_mm"
    assert model.blocks[0].residual_gate is dispatch.fused_residual_gate
