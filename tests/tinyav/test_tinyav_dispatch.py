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
    assert recorder.notes["dispatch.int8_mm.plan"] == mm
    assert recorder.notes["dispatch.residual_gate.plan"] == gate


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


# -- what executed, apart from the plan ------------------------------------------------------


def test_cuda_plan_on_cpu_tensors_notes_the_fallback(recorder: Any) -> None:
    # The plan says int_mm and fused_cuda; on this machine's CPU tensors int_mm falls back and
    # the fused gate refuses. The notes must say both facts, not the plan twice.
    quant_scenarios.dispatch_path("cuda", "int_mm", "fused_cuda")
    notes = recorder.notes
    assert notes["dispatch.int8_mm.plan"] == "int_mm"
    assert notes["dispatch.residual_gate.plan"] == "fused_cuda"
    assert notes["dispatch.int8_mm.ran"] == "dequant_matmul"
    assert notes["dispatch.residual_gate.ran"] == "none"
    assert notes["device.asked"] == "cuda" and notes["device.ran"] == "cpu"
    assert "dispatch.int8_mm" not in notes  # no bare key that reads like an execution fact


def test_cpu_plan_runs_as_planned(recorder: Any) -> None:
    quant_scenarios.dispatch_path("cpu", "dequant_matmul", "eager")
    assert recorder.notes["dispatch.int8_mm.ran"] == "dequant_matmul"
    assert recorder.notes["dispatch.residual_gate.ran"] == "eager"


def test_scenario_shapes_reach_every_path_on_cuda_tensors(
    monkeypatch: pytest.MonkeyPatch, recorder: Any
) -> None:
    # Pretend this machine's tensors are CUDA tensors (torch._int_mm and addcmul also run on
    # CPU): the scenario's shapes must then take int_mm and the fused gate for real.
    monkeypatch.setattr(dispatch, "tensor_platform", lambda t: "cuda")
    quant_scenarios.dispatch_path("cuda", "int_mm", "fused_cuda")
    assert recorder.notes["dispatch.int8_mm.ran"] == "int_mm"
    assert recorder.notes["dispatch.residual_gate.ran"] == "fused_cuda"


def _int8_inputs(rows: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    from tinyav.quant.convrot_int8 import quantize_weight

    gen = torch.Generator().manual_seed(1)
    q, s = quantize_weight(torch.randn(64, 256, generator=gen) / 16, convrot=True)
    return torch.randn(rows, 256, generator=gen), q, s


@pytest.mark.parametrize(
    ("looks_like", "rows", "ran"),
    [
        ("cpu", 32, "dequant_matmul"),  # not CUDA tensors
        ("cuda", 16, "dequant_matmul"),  # torch._int_mm needs more than 16 rows
        ("cuda", 17, "int_mm"),
    ],
)
def test_int8_linear_counts_the_path_it_took(
    monkeypatch: pytest.MonkeyPatch, looks_like: str, rows: int, ran: str
) -> None:
    monkeypatch.setattr(dispatch, "tensor_platform", lambda t: looks_like)
    x, q, s = _int8_inputs(rows)
    with dispatch.recording() as executed:
        dispatch.int8_linear(x, q, s, None, convrot=True, groupsize=256, path="int_mm")
    assert executed.ran("int8_mm") == ran
    assert executed.ran("residual_gate") == "none"


def test_recordings_nest_and_stop_at_exit() -> None:
    x, q, s = _int8_inputs(4)
    with dispatch.recording() as outer:
        dispatch.eager_residual_gate(x, x, x)
        with dispatch.recording() as inner:
            dispatch.int8_linear(x, q, s, None, convrot=True, groupsize=256, path="dequant_matmul")
    dispatch.eager_residual_gate(x, x, x)  # outside every recording: counted nowhere
    assert outer.counts["residual_gate"]["eager"] == 1
    assert outer.ran("int8_mm") == inner.ran("int8_mm") == "dequant_matmul"
    assert inner.ran("residual_gate") == "none"


def test_mixed_paths_are_all_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dispatch, "tensor_platform", lambda t: "cuda")
    with dispatch.recording() as executed:
        for rows in (2, 32):  # AdaLN-like 2 rows fall back, token rows take int_mm
            x, q, s = _int8_inputs(rows)
            dispatch.int8_linear(x, q, s, None, convrot=True, groupsize=256, path="int_mm")
    assert executed.ran("int8_mm") == "dequant_matmul,int_mm"
