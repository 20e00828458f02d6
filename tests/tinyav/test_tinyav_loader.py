"""Loader: exact quantized loading, same path for every format/variant, and every rejection."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import torch
from tinyav import badfiles
from tinyav.checkpoint import MARKER_SUFFIX, decode_marker, write_checkpoint
from tinyav.errors import CheckpointError, CorruptCheckpointError, UnsupportedFormatError
from tinyav.loader import inspect_checkpoint, load_dit, read_header
from tinyav.quant import Fp8Linear, Int8ConvRotLinear
from tinyav.scenarios import loader as loader_scenarios


@pytest.mark.parametrize("fmt", ["bf16", "int8_convrot", "fp8"])
@pytest.mark.parametrize("variant", ["full", "pruned"])
def test_load_exact(tmp_path: Path, fmt: str, variant: str) -> None:
    # The scenario asserts byte-exact weights/scales, frozen tensors, no marker keys, QKV order.
    loader_scenarios.load_exact(fmt, variant, workdir=str(tmp_path))


def test_load_exact_with_offload_and_alias(tmp_path: Path) -> None:
    loader_scenarios.load_exact(
        "int8_convrot", offload=True, runtime_quant="kitchen_int8", workdir=str(tmp_path)
    )


def test_writer_is_deterministic(tmp_path: Path) -> None:
    a = write_checkpoint(tmp_path / "a.safetensors", "int8_convrot", seed=3)
    b = write_checkpoint(tmp_path / "b.safetensors", "int8_convrot", seed=3)
    c = write_checkpoint(tmp_path / "c.safetensors", "int8_convrot", seed=4)
    assert a.read_bytes() == b.read_bytes() != c.read_bytes()
    assert not list(tmp_path.glob(".*partial*"))


def test_int8_file_layout(tmp_path: Path) -> None:
    path = write_checkpoint(tmp_path / "q.safetensors", "int8_convrot")
    header = read_header(path)
    assert header.metadata["tinyav.variant"] == "full"
    qkv = header.tensors["blocks.0.attn.qkv_proj.weight"]
    assert qkv.dtype == "I8" and qkv.shape == (768, 256)
    assert header.tensors["blocks.0.attn.qkv_proj.weight_scale"].shape == (768, 1)
    from safetensors.torch import load_file

    tensors = load_file(str(path))
    marker = tensors["blocks.0.attn.qkv_proj" + MARKER_SUFFIX]
    assert marker.dtype == torch.uint8 and marker.ndim == 1
    assert decode_marker(marker) == {
        "format": "int8_tensorwise",
        "convrot": True,
        "convrot_groupsize": 256,
    }
    # in_features 32: not a multiple of 256, stored unrotated and marked so.
    assert decode_marker(tensors["video_patch_proj" + MARKER_SUFFIX]) == {
        "format": "int8_tensorwise",
        "convrot": False,
    }
    model = load_dit(path)
    assert isinstance(model.blocks[0].attn.qkv_proj, Int8ConvRotLinear)
    assert model.blocks[0].attn.qkv_proj.convrot
    assert not model.video_patch_proj.convrot


def test_fp8_file_layout(tmp_path: Path) -> None:
    path = write_checkpoint(tmp_path / "f.safetensors", "fp8")
    info = inspect_checkpoint(path)
    assert info.formats == {"float8_e4m3fn"}
    for suffix, dtype in (("weight", "F8_E4M3"), ("weight_scale", "F32"), ("input_scale", "F32")):
        assert info.header.tensors[f"blocks.1.mlp.fc2.{suffix}"].dtype == dtype
    model = load_dit(path)
    assert isinstance(model.blocks[1].mlp.fc2, Fp8Linear)
    assert model.blocks[1].mlp.fc2.weight.dtype == torch.float8_e4m3fn


def test_pruned_variant_uses_table(tmp_path: Path) -> None:
    path = write_checkpoint(tmp_path / "p.safetensors", "bf16", variant="pruned")
    model = load_dit(path)
    assert model.cfg.variant == "pruned"
    assert tuple(model.adaln_t_table.shape) == (1025, 8)
    assert not hasattr(model, "time_embedder")
    # Interpolation: halfway between two table rows gives their mean.
    sigma = torch.tensor([1.0 - 0.5 / 1024])
    row = model.timestep_condition(sigma)[0]
    table = model.adaln_t_table.float()
    assert torch.allclose(row, (table[0] + table[1]) / 2, atol=1e-6)


@pytest.mark.parametrize("defect", badfiles.DEFECTS)
def test_rejections(tmp_path: Path, defect: str) -> None:
    loader_scenarios.load_rejects(defect, workdir=str(tmp_path))


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp8", "gguf_q4"])
def test_unsupported_formats(tmp_path: Path, fmt: str) -> None:
    path = tmp_path / "u.safetensors"
    badfiles.make("unsupported_format", path, fmt=fmt)
    with pytest.raises(UnsupportedFormatError) as info:
        load_dit(path)
    assert info.value.fmt == fmt and info.value.layer == badfiles.LAYER
    assert str(path) in str(info.value)


def _raw(path: Path) -> tuple[int, dict[str, object], bytes]:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return n, json.loads(raw[8 : 8 + n]), raw[8 + n :]


def _rewrite(path: Path, header: dict[str, object], data: bytes) -> None:
    blob = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + data)


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (lambda h: h["blocks.0.mlp.fc1.bias"].update(shape=[3, -1]), "non-negative"),
        (lambda h: h["blocks.0.mlp.fc1.bias"].update(dtype="F4"), "unknown dtype"),
        (lambda h: h["blocks.0.mlp.fc1.bias"].update(data_offsets=[10, 2]), "data_offsets"),
        (lambda h: h["blocks.0.mlp.fc1.bias"].update(extra=1), "exactly dtype"),
        (lambda h: h["blocks.0.mlp.fc1.bias"].update(data_offsets=[0, 2048]), "byte range"),
        (lambda h: h.update(__metadata__={"a": 1}), "__metadata__"),
        (
            lambda h: h["blocks.0.attn.out_proj.bias"].update(
                data_offsets=h["blocks.0.cross_attn.out_proj.bias"]["data_offsets"]
            ),
            "overlaps",
        ),
    ],
)
def test_header_entry_validation(tmp_path: Path, edit: object, needle: str) -> None:
    path = write_checkpoint(tmp_path / "h.safetensors", "bf16")
    _, header, data = _raw(path)
    edit(header)  # type: ignore[operator]
    _rewrite(path, header, data)
    with pytest.raises(CorruptCheckpointError, match=needle) as info:
        read_header(path)
    assert str(path) in str(info.value)


def test_header_not_an_object_and_not_tinyav(tmp_path: Path) -> None:
    path = tmp_path / "list.safetensors"
    blob = b"[1, 2]  "
    path.write_bytes(struct.pack("<Q", len(blob)) + blob)
    with pytest.raises(CorruptCheckpointError, match="expected an object"):
        read_header(path)
    from safetensors.torch import save_file

    other = tmp_path / "other.safetensors"
    save_file({"w": torch.zeros(2)}, str(other))
    with pytest.raises(CheckpointError, match="not a tinyav checkpoint"):
        load_dit(other)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="cannot read"):
        load_dit(tmp_path / "nope.safetensors")
