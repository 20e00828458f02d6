"""A quantized layer keeps its dequantized weight between forwards (tinyav.quant.reuse): the
same bits as dequantizing on every forward, recomputed when a stored tensor is written in place
or replaced and when the compute dtype changes, and nothing kept under layerwise offload."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
import torch
from tinyav.checkpoint import write_checkpoint
from tinyav.fp8 import FNUZ
from tinyav.loader import _install_offload, load_dit
from tinyav.pipeline import Pipeline, Request
from tinyav.quant import ConvRotInt8Config, Fp8Config
from tinyav.quant.convrot_int8 import quantize_weight
from tinyav.quant.reuse import DequantCache

GEN = torch.Generator().manual_seed(3)


def _int8_layer(seed: int = 0) -> torch.nn.Module:
    cfg = ConvRotInt8Config()
    layer = cfg.make_linear(512, 64, True, cfg.marker(512))
    w = torch.randn(64, 512, generator=torch.Generator().manual_seed(seed)) / 16
    q, s = quantize_weight(w, convrot=True)
    layer.load_state_dict({"weight": q, "weight_scale": s, "bias": torch.zeros(64)})
    return layer


def _fp8_layer(seed: int = 0) -> torch.nn.Module:
    layer = Fp8Config().make_linear(256, 32, True, {"format": "float8_e4m3fn"})
    w = torch.randn(32, 256, generator=torch.Generator().manual_seed(seed)) / 16
    layer.load_state_dict(
        {
            "weight": (w / 0.01).to(torch.float8_e4m3fn),
            "weight_scale": torch.tensor(0.01),
            "input_scale": torch.tensor(0.02),
            "bias": torch.zeros(32),
        }
    )
    return layer


def _fresh(layer: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """What the layer gives dequantizing on this forward (nothing kept)."""
    layer.dequantized.clear()
    layer.dequantized.enabled = False
    try:
        return layer(x)  # type: ignore[no-any-return]
    finally:
        layer.dequantized.enabled = True


@pytest.mark.parametrize("make", [_int8_layer, _fp8_layer], ids=["int8-convrot", "fp8"])
def test_kept_weight_gives_the_bits_of_a_fresh_dequantization(make: object) -> None:
    layer = make()  # type: ignore[operator]
    x = torch.randn(2, 7, layer.in_features, generator=GEN)
    first = layer(x)
    kept = layer.dequantized._value
    assert kept is not None
    again = layer(x)
    assert layer.dequantized._value is kept  # reused, not recomputed
    assert torch.equal(first, again) and torch.equal(again, _fresh(layer, x))


@pytest.mark.parametrize("make", [_int8_layer, _fp8_layer], ids=["int8-convrot", "fp8"])
def test_an_in_place_write_to_a_stored_tensor_is_seen_on_the_next_forward(make: object) -> None:
    layer, other = make(0), make(1)  # type: ignore[operator]
    x = torch.randn(3, layer.in_features, generator=GEN)
    before = layer(x)
    layer.load_state_dict(other.state_dict())  # copies into the same tensors
    after = layer(x)
    assert torch.equal(after, other(x)) and not torch.equal(after, before)
    layer.weight_scale.mul_(2)  # a scale written in place alone
    assert torch.equal(layer(x), _fresh(layer, x)) and not torch.equal(layer(x), after)


def test_a_replaced_buffer_and_another_dtype_are_recomputed() -> None:
    layer, other = _int8_layer(0), _int8_layer(1)
    x = torch.randn(4, 512, generator=GEN)
    layer.weight = torch.zeros_like(layer.weight)  # new tensors, at version 0 both times
    zero = layer(x)
    layer.weight = other.weight.clone()
    assert torch.equal(layer(x), _fresh(layer, x)) and not torch.equal(layer(x), zero)
    half = layer(x.to(torch.bfloat16))
    assert half.dtype == torch.bfloat16 and layer.dequantized._dtype == torch.bfloat16
    assert torch.equal(half, _fresh(layer, x.to(torch.bfloat16)))


def test_fp8_flavour_normalization_is_seen_by_the_next_forward() -> None:
    layer = _fp8_layer()
    x = torch.randn(4, 256, generator=GEN)
    layer(x)
    layer.to_platform("hip", "gfx942")  # e4m3fn -> e4m3fnuz: new weight and scale tensors
    assert layer.weight.dtype == FNUZ
    out = layer(x)
    assert layer.dequantized._sources[0] is layer.weight
    assert torch.equal(out, _fresh(layer, x))


def test_a_weight_kept_in_inference_mode_is_not_used_where_autograd_records() -> None:
    layer = _int8_layer()
    x = torch.randn(2, 512, generator=GEN)
    with torch.inference_mode():
        inferred = layer(x)
    xg = x.clone().requires_grad_(True)
    out = layer(xg)  # a weight made in inference mode here: "cannot be saved for backward"
    out.sum().backward()
    assert xg.grad is not None and torch.equal(out.detach(), inferred)


def test_cache_compares_tensors_by_identity_and_version() -> None:
    cache = DequantCache()
    a, b = torch.ones(2), torch.ones(2)  # equal values, different tensors
    calls: list[int] = []

    def compute() -> torch.Tensor:
        calls.append(1)
        return torch.zeros(1)

    cache.get((a,), torch.float32, compute)
    cache.get((a,), torch.float32, compute)
    assert len(calls) == 1
    cache.get((b,), torch.float32, compute)
    assert len(calls) == 2
    b.add_(0)
    cache.get((b,), torch.float32, compute)
    assert len(calls) == 3


def test_layerwise_offload_keeps_no_dequantized_weight(tmp_path: Path) -> None:
    """Offload hooks exist only for a device other than the CPU (absent here), so they are
    installed directly: every quantized layer in a block stops keeping its weight, the layers
    outside the blocks (which stay on the device) keep theirs, and a disabled cache holds
    nothing after a forward."""
    ckpt = write_checkpoint(tmp_path / "int8.safetensors", "int8_convrot")
    model = load_dit(ckpt)
    in_blocks = [m for m in model.blocks.modules() if hasattr(m, "dequantized")]
    assert len(in_blocks) > 20 and all(m.dequantized.enabled for m in in_blocks)
    _install_offload(model, torch.device("cpu"))
    assert not any(m.dequantized.enabled for m in in_blocks)
    outside = [m for m in model.modules() if hasattr(m, "dequantized") and m not in in_blocks]
    assert all(m.dequantized.enabled for m in outside)
    layer = in_blocks[0]
    x = torch.randn(3, layer.in_features, generator=GEN)
    assert torch.equal(layer(x), layer(x)) and layer.dequantized._value is None


@pytest.mark.parametrize("fmt", ["int8_convrot", "fp8"])
def test_a_pipeline_gives_the_same_bits_with_and_without_kept_weights(
    tmp_path: Path, fmt: str
) -> None:
    ckpt = write_checkpoint(tmp_path / f"{fmt}.safetensors", fmt)
    kept = Pipeline.from_checkpoint(ckpt)
    plain = Pipeline.from_checkpoint(ckpt)
    for m in plain.dit.modules():
        if hasattr(m, "dequantized"):
            m.dequantized.enabled = False
    a, b = kept(Request("a fox", seed=5)), plain(Request("a fox", seed=5))

    def digest(r: object) -> str:
        return hashlib.sha256(
            np.ascontiguousarray(r.frames).tobytes() + np.ascontiguousarray(r.pcm).tobytes()  # type: ignore[attr-defined]
        ).hexdigest()

    assert digest(a) == digest(b)
    assert any(
        m.dequantized._value is not None for m in kept.dit.modules() if hasattr(m, "dequantized")
    )
