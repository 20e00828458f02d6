"""INT8 ConvRot for the diffusers transformer, in process: the group rule, the Hadamard, the
per-output-channel quantizer, the module swap and the dispatch plan."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from diffcases import IN_PROCESS, require_diffusers

require_diffusers("the diffusers scenarios need diffusers installed")
pytestmark = IN_PROCESS

ROOT = Path(__file__).resolve().parents[2]
CODE_ROOT = ROOT / "targets" / "diffusers_scenarios"
if str(CODE_ROOT) not in sys.path:
    sys.path.insert(0, str(CODE_ROOT))

import torch  # noqa: E402
from diffusers_scenarios import loader, quant, quant_cases  # noqa: E402
from diffusers_scenarios.transformer_ckpt import (  # noqa: E402
    PREFIX,
    TINY_WAN,
    build_wan,
    comfy_state_dict,
    quantizable_layers,
    write_checkpoint,
)
from torch import nn  # noqa: E402

from harness import probe  # noqa: E402


@pytest.mark.parametrize(
    ("width", "group"), [(256, 256), (512, 256), (768, 256), (48, 16), (32, 32), (96, 32), (7, 1)]
)
def test_group_is_256_where_the_width_allows_else_the_largest_power_of_two(
    width: int, group: int
) -> None:
    assert quant.group_for(width) == group
    assert quant.marker(width) == {
        "format": "int8_tensorwise",
        "convrot": group > 1,
        "convrot_groupsize": group,
    }


def test_group_of_a_non_positive_width_is_an_error() -> None:
    with pytest.raises(ValueError, match="in_features must be positive, got 0"):
        quant.group_for(0)


@pytest.mark.parametrize("n", [1, 2, 16, 32, 256])
def test_hadamard_is_symmetric_orthonormal_and_its_own_inverse(n: int) -> None:
    h = quant.hadamard(n, torch.float64)
    assert torch.equal(h, h.T)
    assert torch.allclose(h @ h, torch.eye(n, dtype=torch.float64), atol=1e-12)
    x = torch.randn(3, 2 * n, generator=torch.Generator().manual_seed(n))
    back = quant.rotate_grouped(quant.rotate_grouped(x, n), n)
    assert torch.allclose(back, x, atol=1e-5)


def test_quantized_weight_is_int8_with_float32_scales_per_output_channel() -> None:
    w = torch.randn(24, 48, generator=torch.Generator().manual_seed(0)) / 7
    q, scale = quant.quantize_weight(w, 16)
    assert q.dtype == torch.int8 and q.shape == (24, 48)
    assert scale.dtype == torch.float32 and scale.shape == (24, 1)
    assert int(q.abs().amax(dim=1).min()) == 127  # every row uses its full range
    back = quant.dequantize_weight(q, scale, 16)
    assert float((back - w).norm() / w.norm()) < 0.01
    # The stored weight is rotated: dequantizing without the rotation does not give w back.
    assert float(((q.float() * scale) - w).norm() / w.norm()) > 0.5


def test_quantize_checkpoint_marks_exactly_the_layers_it_quantizes() -> None:
    sd = comfy_state_dict(build_wan(TINY_WAN, 0))
    layers = quantizable_layers(sd)
    # 8 per block (the fused qkv is one file layer, three diffusers modules) and the head.
    assert len(layers) == 17 and PREFIX + "head.head" in layers
    assert not any("embedding" in name for name in layers)
    out = quant.quantize_checkpoint(sd, layers)
    for name in layers:
        assert out[f"{name}.weight"].dtype == torch.int8
        marker = quant.decode_marker(out[f"{name}.comfy_quant"])
        assert marker["convrot_groupsize"] == quant.group_for(sd[f"{name}.weight"].shape[1])
        assert torch.equal(out[f"{name}.bias"], sd[f"{name}.bias"])
    markers = [k for k in out if k.endswith(".comfy_quant")]
    assert len(markers) == 17
    assert {quant.decode_marker(out[k])["convrot_groupsize"] for k in markers} == {16, 256}


class _Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(32, 8)
        self.norm = nn.LayerNorm(8)


def test_swap_linears_replaces_named_linears_and_names_what_it_cannot() -> None:
    model = _Tiny()
    swapped = quant.swap_linears(model, {"proj": 32})
    assert isinstance(model.proj, quant.Int8ConvRotLinear) and swapped == {"proj": model.proj}
    assert model.proj.weight.dtype == torch.int8 and model.proj.weight_scale.shape == (8, 1)
    with pytest.raises(KeyError, match="the model has no layer 'nope'"):
        quant.swap_linears(model, {"nope": 1})
    with pytest.raises(TypeError, match=r"'norm' is a LayerNorm, not an nn\.Linear"):
        quant.swap_linears(model, {"norm": 1})


def test_plan_follows_capabilities_and_falls_back_to_the_platform_name() -> None:
    assert quant.plan_int8_mm("cuda", ["bf16", "int8_mm"]) == "int_mm"
    assert quant.plan_int8_mm("cuda", ["bf16"]) == "dequant_matmul"  # e.g. a pre-sm_75 card
    assert quant.plan_int8_mm("hip", ["bf16", "fp8"]) == "dequant_matmul"
    assert quant.plan_int8_mm("cuda", None) == "int_mm"
    for platform in ("cpu", "hip", "npu", "xpu", "mps", None):
        assert quant.plan_int8_mm(platform, None) == "dequant_matmul"


def _int8_layer(seed: int = 0) -> tuple[quant.Int8ConvRotLinear, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(64, 256, generator=gen) / 16
    mod = quant.Int8ConvRotLinear(256, 64, True, 256)
    mod.weight, mod.weight_scale = quant.quantize_weight(w, 256)
    mod.bias = torch.randn(64, generator=gen)
    return mod, torch.randn(4, 8, 256, generator=gen)


def test_planned_int_mm_falls_back_on_cpu_tensors_and_counts_what_ran() -> None:
    mod, x = _int8_layer()
    mod.mm_path = "int_mm"
    mod(x)
    assert dict(mod.ran) == {"dequant_matmul": 1}
    model = nn.Sequential(mod)
    quant.set_path(model, "dequant_matmul")
    assert quant.executed(model) == "none" and mod.mm_path == "dequant_matmul"


def test_int_mm_math_on_cpu_tensors_with_the_cuda_guard_lifted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The int_mm branch normally runs on CUDA only; its arithmetic (rotated per-token int8
    activations, torch._int_mm, both scales) is checked here against the dequant path."""
    mod, x = _int8_layer(1)
    ref = mod(x)
    monkeypatch.setattr(quant, "int_mm_applies", lambda x, w: True)
    mod.mm_path = "int_mm"
    out = mod(x)
    assert mod.ran["int_mm"] == 1
    assert float((out - ref).norm() / ref.norm()) < 0.02


@pytest.fixture
def recording(tmp_path: Path) -> Iterator[Any]:
    rec = probe._begin(seed=0, platform="cuda", output_dir=tmp_path / "probe")
    try:
        yield rec
    finally:
        probe._end()


def test_platform_identity_without_an_identity_uses_the_platform_name(recording: Any) -> None:
    # an attempt begun without an identity: probe.platform_info() is None
    assert probe.platform_info() is None
    assert quant_cases.platform_identity() == ("cuda", None, "platform name")


def test_platform_identity_uses_platform_info_capabilities_mocked_platform_info(
    recording: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """probe.platform_info() comes with the platform layer's identity; mocked here as the
    identity of a simulated V100 (sm_70: no integer matmul), where the name alone says int_mm."""
    info = {"platform": "cuda", "arch": "sm_70", "capabilities": ["device_events"]}
    monkeypatch.setattr(probe, "platform_info", lambda: info, raising=False)
    platform, caps, source = quant_cases.platform_identity()
    assert (platform, caps, source) == ("cuda", ["device_events"], "platform_info")
    assert quant.plan_int8_mm(platform, caps) == "dequant_matmul"


def test_dropping_weight_scale_from_the_file_is_rejected_by_name(tmp_path: Path) -> None:
    sd = comfy_state_dict(build_wan(TINY_WAN, 0))
    out = quant.quantize_checkpoint(sd, quantizable_layers(sd))
    key = PREFIX + "blocks.1.self_attn.qkv.weight_scale"
    del out[key]
    path = write_checkpoint(tmp_path / "noscale.safetensors", out)
    with pytest.raises(loader.MissingKeyError) as info:
        loader.load_transformer(path, attention_head_dim=16)
    assert info.value.key == key and "noscale.safetensors" in str(info.value)


def test_int8_load_keeps_the_file_bits_and_splits_fused_scales(tmp_path: Path) -> None:
    sd = comfy_state_dict(build_wan(TINY_WAN, 2))
    out = quant.quantize_checkpoint(sd, quantizable_layers(sd))
    path = write_checkpoint(tmp_path / "q.safetensors", out)
    loaded = loader.load_transformer(path, attention_head_dim=16)
    mods = quant.quantized_modules(loaded.model)
    assert len(mods) == 21 and loaded.groups == {n: m.group for n, m in mods.items()}
    fused_scale = out[PREFIX + "blocks.0.self_attn.qkv.weight_scale"]
    for i, proj in enumerate(("to_q", "to_k", "to_v")):
        mod = mods[f"blocks.0.attn1.{proj}"]
        assert torch.equal(mod.weight_scale, fused_scale[i * 48 : (i + 1) * 48])
    assert not any(k.endswith("comfy_quant") for k in loaded.model.state_dict())
