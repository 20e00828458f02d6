"""The ComfyUI -> diffusers loader of the Wan transformer, in process: exact round trip, config
from shapes, and every bad file rejected by name (targets/diffusers_scenarios)."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest
from diffcases import IN_PROCESS, require_diffusers

require_diffusers("the diffusers scenarios need diffusers installed")
pytestmark = IN_PROCESS

ROOT = Path(__file__).resolve().parents[2]
CODE_ROOT = ROOT / "targets" / "diffusers_scenarios"
if str(CODE_ROOT) not in sys.path:
    sys.path.insert(0, str(CODE_ROOT))

import torch  # noqa: E402
from diffusers_scenarios import loader, loader_cases, quant  # noqa: E402
from diffusers_scenarios.transformer_ckpt import (  # noqa: E402
    PREFIX,
    TINY_WAN,
    build_wan,
    comfy_state_dict,
    quantizable_layers,
    write_checkpoint,
)


@pytest.fixture(scope="module")
def source() -> torch.nn.Module:
    torch.set_num_threads(1)
    return build_wan(TINY_WAN, seed=3)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().reshape(-1).view(torch.uint8)


def test_round_trip_is_bit_exact_and_the_config_comes_from_the_shapes(
    source: torch.nn.Module, tmp_path: Path
) -> None:
    path = write_checkpoint(tmp_path / "wan.safetensors", comfy_state_dict(source))
    loaded = loader.load_transformer(path, attention_head_dim=16)
    want, got = source.state_dict(), loaded.model.state_dict()
    assert set(got) == set(want) and len(want) == 69
    for k in want:
        assert got[k].dtype == want[k].dtype and torch.equal(_bits(got[k]), _bits(want[k])), k
    for key in ("num_layers", "num_attention_heads", "ffn_dim", "text_dim", "freq_dim"):
        assert loaded.config[key] == TINY_WAN[key], key
    assert loaded.config["patch_size"] == TINY_WAN["patch_size"]
    assert loaded.groups == {} and loaded.tensors_read == 61
    assert not any(p.requires_grad for p in loaded.model.parameters())


def test_the_file_really_is_comfyui_layout(source: torch.nn.Module) -> None:
    sd = comfy_state_dict(source)
    assert all(k.startswith(PREFIX) for k in sd)
    qkv = sd[PREFIX + "blocks.0.self_attn.qkv.weight"]
    assert qkv.shape == (3 * 48, 48)
    attn1 = source.get_submodule("blocks.0.attn1")
    for i, proj in enumerate(("to_q", "to_k", "to_v")):  # q, k, v rows in that order
        assert torch.equal(qkv[i * 48 : (i + 1) * 48], getattr(attn1, proj).weight)
    assert not any(".to_q." in k or ".attn1." in k or "condition_embedder" in k for k in sd)


def test_heads_follow_attention_head_dim_and_a_width_it_does_not_divide_is_rejected(
    tmp_path: Path,
) -> None:
    cfg = {**TINY_WAN, "num_attention_heads": 2, "attention_head_dim": 24, "num_layers": 1}
    path = write_checkpoint(tmp_path / "w.safetensors", comfy_state_dict(build_wan(cfg, 0)))
    assert loader.load_transformer(path, attention_head_dim=24).config["num_attention_heads"] == 2
    assert loader.load_transformer(path, attention_head_dim=16).config["num_attention_heads"] == 3
    with pytest.raises(loader.ShapeMismatchError, match="not a multiple of attention_head_dim 32"):
        loader.load_transformer(path, attention_head_dim=32)


def test_an_unprefixed_file_loads_and_a_stray_unprefixed_key_is_named(
    source: torch.nn.Module, tmp_path: Path
) -> None:
    sd = {k.removeprefix(PREFIX): v for k, v in comfy_state_dict(source).items()}
    path = write_checkpoint(tmp_path / "bare.safetensors", sd)
    got = loader.load_transformer(path, attention_head_dim=16).model.state_dict()
    assert all(torch.equal(got[k], v) for k, v in source.state_dict().items())
    mixed = comfy_state_dict(source)
    mixed["blocks.0.ffn.0.weight"] = mixed.pop(PREFIX + "blocks.0.ffn.0.weight")
    path = write_checkpoint(tmp_path / "mixed.safetensors", mixed)
    with pytest.raises(loader.UnknownKeyError, match=r"mixed\.safetensors: 'blocks\.0\.ffn\.0"):
        loader.load_transformer(path, attention_head_dim=16)


@pytest.mark.parametrize(
    ("defect", "error"),
    [
        ("truncated_header", loader.CorruptHeaderError),
        ("missing_projection", loader.MissingKeyError),
        ("transposed", loader.ShapeMismatchError),
        ("unknown_key", loader.UnknownKeyError),
        ("missing_scale", loader.MissingKeyError),
        ("qkv_rows", loader.ShapeMismatchError),
    ],
)
def test_every_bad_file_is_rejected_naming_file_and_key(
    defect: str, error: type[loader.CheckpointError], tmp_path: Path
) -> None:
    path = tmp_path / f"bad-{defect}.safetensors"
    loader_cases.make_defect(defect, path, seed=0)
    with pytest.raises(error) as info:
        loader.load_transformer(path, attention_head_dim=16)
    assert str(info.value).startswith(f"bad-{defect}.safetensors: ")
    assert info.value.key == loader_cases.DEFECT_KEYS[defect]
    if info.value.key is not None:
        assert repr(info.value.key) in str(info.value)


def test_the_transposed_tensor_is_called_transposed(tmp_path: Path) -> None:
    path = tmp_path / "t.safetensors"
    loader_cases.make_defect("transposed", path, seed=0)
    with pytest.raises(loader.ShapeMismatchError, match=r"is \[48, 256\].*\[256, 48\].*transposed"):
        loader.load_transformer(path, attention_head_dim=16)


def _int8_file(source: torch.nn.Module) -> dict[str, torch.Tensor]:
    sd = comfy_state_dict(source)
    return quant.quantize_checkpoint(sd, quantizable_layers(sd))


def test_int8_without_a_marker_and_unsupported_markers_are_rejected_by_name(
    source: torch.nn.Module, tmp_path: Path
) -> None:
    layer = PREFIX + "blocks.1.cross_attn.o"
    unmarked = _int8_file(source)
    del unmarked[layer + ".comfy_quant"]
    path = write_checkpoint(tmp_path / "unmarked.safetensors", unmarked)
    with pytest.raises(loader.QuantMarkerError, match=rf"'{layer}.weight': is int8 but"):
        loader.load_transformer(path, attention_head_dim=16)
    for marker, why in [
        ({"format": "nvfp4"}, "unsupported format 'nvfp4'"),
        (
            {"format": "int8_tensorwise", "convrot": True, "convrot_groupsize": 32},
            "convrot group 32 != 16",
        ),
    ]:
        bad = _int8_file(source)
        bad[layer + ".comfy_quant"] = quant.encode_marker(marker)
        path = write_checkpoint(tmp_path / "marker.safetensors", bad)
        with pytest.raises(loader.QuantMarkerError, match=rf"'{layer}.comfy_quant': {why}"):
            loader.load_transformer(path, attention_head_dim=16)


def test_a_scale_of_the_wrong_shape_or_dtype_is_rejected(
    source: torch.nn.Module, tmp_path: Path
) -> None:
    key = PREFIX + "blocks.0.ffn.0.weight_scale"
    for value, err, msg in [
        (lambda t: t.reshape(-1), loader.ShapeMismatchError, r"is \[256\], expected \[256, 1\]"),
        (lambda t: t.to(torch.bfloat16), loader.QuantMarkerError, "is BF16, int8_tensorwise"),
    ]:
        bad = _int8_file(source)
        bad[key] = value(bad[key]).contiguous()
        path = write_checkpoint(tmp_path / "scale.safetensors", bad)
        with pytest.raises(err, match=msg):
            loader.load_transformer(path, attention_head_dim=16)


def _digest(seed: int) -> str:
    h = hashlib.sha256()
    for k, v in sorted(build_wan(TINY_WAN, seed).state_dict().items()):
        h.update(k.encode() + _bits(v).numpy().tobytes())
    return h.hexdigest()


def test_two_processes_build_identical_weights_and_seeds_differ(
    fresh_digests: dict[tuple[str, str, int], str],
) -> None:
    # built in a fresh interpreter by tests/diffusers/conftest.py's ``fresh_digests``
    assert fresh_digests[("transformer", "wan", 5)] == _digest(5)
    assert _digest(5) != _digest(6)
    # No two tensors alike: a swap of any two same-shaped tensors would show.
    values = [_bits(v).numpy().tobytes() for v in build_wan(TINY_WAN, 5).state_dict().values()]
    assert len(set(values)) == len(values), json.dumps(len(values))


@pytest.mark.parametrize(
    "key",
    [
        "blocks.1.cross_attn.v.weight",
        "blocks.0.self_attn.qkv.bias",
        "blocks.1.modulation",
        "blocks.0.norm3.bias",
        "head.modulation",
        "time_projection.1.bias",
    ],
)
def test_a_missing_tensor_is_named_by_its_comfyui_key(
    key: str, source: torch.nn.Module, tmp_path: Path
) -> None:
    sd = comfy_state_dict(source)
    del sd[PREFIX + key]
    path = write_checkpoint(tmp_path / "gap.safetensors", sd)
    with pytest.raises(loader.MissingKeyError) as info:
        loader.load_transformer(path, attention_head_dim=16)
    assert info.value.key == PREFIX + key, str(info.value)
