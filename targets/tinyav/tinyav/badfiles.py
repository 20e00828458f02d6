"""Builders of malformed checkpoints, each paired with the rejection the loader must give.

Used by the loader cases and the unit tests: every defect starts from a good file written by
:func:`tinyav.checkpoint.write_checkpoint` and damages one thing.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file

from tinyav.checkpoint import MARKER_SUFFIX, save_safetensors, write_checkpoint
from tinyav.errors import (
    CheckpointError,
    CorruptCheckpointError,
    MissingTensorError,
    QuantConfigConflictError,
    UnsupportedFormatError,
)

# The layer the tensor-level defects damage: fused QKV of the first block (rotated, in=256).
LAYER = "blocks.0.attn.qkv_proj"


@dataclass(frozen=True)
class Expectation:
    """What loading a damaged file must raise: class, and substrings of the message."""

    error: type[CheckpointError]
    contains: tuple[str, ...]
    runtime_quant: str | None = None


def _split(path: Path) -> tuple[int, dict[str, object], bytes]:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return n, json.loads(raw[8 : 8 + n]), raw[8 + n :]


def _join(path: Path, header: dict[str, object], data: bytes) -> None:
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + data)


def _edit_tensors(path: Path, edit: Callable[[dict[str, torch.Tensor]], None]) -> None:
    # Our own freshly written file, read with safetensors (no pickle).
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata()
    tensors = load_file(str(path))
    edit(tensors)
    save_safetensors(tensors, path, meta or {})


def _set_marker(raw: bytes) -> Callable[[dict[str, torch.Tensor]], None]:
    def edit(t: dict[str, torch.Tensor]) -> None:
        t[LAYER + MARKER_SUFFIX] = torch.tensor(list(raw), dtype=torch.uint8)

    return edit


def make(
    defect: str, path: str | os.PathLike[str], *, fmt: str = "nvfp4", seed: int = 0
) -> Expectation:
    """Write a checkpoint with ``defect`` to ``path``; return what loading it must raise.

    Defects: ``unsupported_format`` (``fmt`` names it, e.g. ``nvfp4``, ``mxfp8``),
    ``marker_without_format``, ``marker_not_json``, ``missing_scale``, ``runtime_conflict``,
    ``groupsize_conflict``, ``online_quant``, ``unmarked_int8``, ``truncated``, ``tiny_file``,
    ``header_too_long``, ``header_not_json``, ``byte_range_mismatch``.
    """
    p = Path(path)
    name = p.name
    base_fmt = "bf16" if defect == "online_quant" else "int8_convrot"
    write_checkpoint(p, base_fmt, seed=seed)  # type: ignore[arg-type]
    if defect == "unsupported_format":
        _edit_tensors(p, _set_marker(json.dumps({"format": fmt}).encode()))
        return Expectation(UnsupportedFormatError, (name, LAYER, fmt, "unsupported"))
    if defect == "marker_without_format":
        _edit_tensors(p, _set_marker(b'{"convrot": true, "convrot_groupsize": 256}'))
        return Expectation(CorruptCheckpointError, (name, LAYER, "no 'format'"))
    if defect == "marker_not_json":
        _edit_tensors(p, _set_marker(b'{"format": int8_tensorwise'))
        return Expectation(CorruptCheckpointError, (name, LAYER, "not valid JSON"))
    if defect == "missing_scale":
        _edit_tensors(p, lambda t: t.pop(LAYER + ".weight_scale"))
        return Expectation(MissingTensorError, (name, LAYER, "int8_tensorwise", "weight_scale"))
    if defect == "runtime_conflict":
        return Expectation(
            QuantConfigConflictError, (name, "int8_tensorwise", "fp8", "layer"), runtime_quant="fp8"
        )
    if defect == "groupsize_conflict":
        return Expectation(
            QuantConfigConflictError,
            (name, "layer", "int8_tensorwise", "groupsize 128"),
            runtime_quant="convrot_int8:128",
        )
    if defect == "online_quant":
        return Expectation(
            QuantConfigConflictError,
            (name, "bf16", "not quantized", "layer"),
            runtime_quant="kitchen_int8",
        )
    if defect == "unmarked_int8":
        _edit_tensors(p, lambda t: t.pop(LAYER + MARKER_SUFFIX))
        return Expectation(CheckpointError, (name, LAYER, "I8", "no comfy_quant marker"))
    raw = p.read_bytes()
    if defect == "truncated":
        p.write_bytes(raw[: len(raw) // 2])
        return Expectation(CorruptCheckpointError, (name, "truncated"))
    if defect == "tiny_file":
        p.write_bytes(raw[:5])
        return Expectation(CorruptCheckpointError, (name, "truncated", "8-byte"))
    if defect == "header_too_long":
        p.write_bytes(struct.pack("<Q", len(raw) + 1000) + raw[8:])
        return Expectation(CorruptCheckpointError, (name, "header length", "larger than the file"))
    if defect == "header_not_json":
        n, _, data = _split(p)
        p.write_bytes(struct.pack("<Q", n) + b"{tinyav: [" + b" " * (n - 10) + data)
        return Expectation(CorruptCheckpointError, (name, "not valid JSON"))
    if defect == "byte_range_mismatch":
        _, header, data = _split(p)
        entry = header[LAYER + ".weight"]
        assert isinstance(entry, dict)
        entry["dtype"] = "BF16"  # twice the bytes the range holds
        _join(p, header, data)
        return Expectation(CorruptCheckpointError, (name, LAYER, "BF16", "byte range"))
    raise ValueError(f"unknown defect {defect!r}")


DEFECTS = (
    "unsupported_format",
    "marker_without_format",
    "marker_not_json",
    "missing_scale",
    "runtime_conflict",
    "groupsize_conflict",
    "online_quant",
    "unmarked_int8",
    "truncated",
    "tiny_file",
    "header_too_long",
    "header_not_json",
    "byte_range_mismatch",
)


def runtime_config(spec: str | None) -> object:
    """A runtime quantization setting from ``"name"`` or ``"name:groupsize"`` (None passes)."""
    if spec is None or ":" not in spec:
        return spec
    from tinyav import quant

    name, arg = spec.split(":", 1)
    return quant.get_quantization_config(name)(int(arg))  # type: ignore[call-arg]
