"""Header-first, validating loader for tinyav single-file safetensors checkpoints.

Order of work, so a bad file is rejected before any tensor data is read:

1. :func:`~tinyav.header.read_header` (re-exported here) parses the 8-byte little-endian
   header length and the JSON header itself and checks every entry (dtype known, shape sane,
   byte range inside the file and matching dtype x shape, no overlaps).
2. :func:`inspect_checkpoint` reads only the small ``*.comfy_quant`` marker tensors, validates
   them (JSON, ``format`` present and supported, required scales present, dtypes right) and
   checks the runtime quantization setting against them.
3. :func:`load_dit` builds the model on the meta device, swaps in the quantized modules the
   markers call for, and assigns the file's tensors (metadata-only keys filtered out).

Every rejection is a :class:`~tinyav.errors.CheckpointError` naming the file (and the layer and
format when there is one); a file is never silently loaded as float weights.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from tinyav import quant
from tinyav._probe import probe
from tinyav.checkpoint import MARKER_SUFFIX
from tinyav.errors import (
    CheckpointError,
    CorruptCheckpointError,
    MissingTensorError,
    QuantConfigConflictError,
    UnsupportedFormatError,
)
from tinyav.header import (
    DTYPES,
    FLOAT_DTYPES,
    MAX_HEADER_BYTES,
    Header,
    TensorEntry,
    read_bytes,
    read_header,
)
from tinyav.model import DiTConfig, TinyDiT

__all__ = [
    "DTYPES",
    "FLOAT_DTYPES",
    "MAX_HEADER_BYTES",
    "CheckpointInfo",
    "Header",
    "TensorEntry",
    "inspect_checkpoint",
    "load_dit",
    "quantized_modules",
    "read_header",
    "summary",
]

# Expected storage of each serialized format: tensor suffix -> allowed safetensors dtypes.
_LAYOUT: dict[str, dict[str, set[str]]] = {
    "int8_tensorwise": {"weight": {"I8"}, "weight_scale": {"F32"}},
    "float8_e4m3fn": {"weight": {"F8_E4M3"}, "weight_scale": {"F32"}, "input_scale": {"F32"}},
}


@dataclass(frozen=True)
class CheckpointInfo:
    """What the header and markers say about a checkpoint, before any weight is read."""

    header: Header
    config: DiTConfig
    variant: str
    markers: dict[str, dict[str, Any]] = field(default_factory=dict)
    # layer -> backend config that loads it
    layer_configs: dict[str, quant.QuantizationConfig] = field(default_factory=dict)

    @property
    def formats(self) -> set[str]:
        """Serialized formats present (empty for an unquantized file)."""
        return {m["format"] for m in self.markers.values()}

    @property
    def format(self) -> str:
        """The format the file itself shows, never the one anyone asked for.

        The serialized ``comfy_quant`` formats of its layers (``int8_tensorwise``,
        ``float8_e4m3fn``; comma-joined if mixed), or for a file without markers the storage
        dtypes of its weights (``bf16``).
        """
        if self.markers:
            return ",".join(sorted(self.formats))
        weights = {e.dtype for n, e in self.header.tensors.items() if n.endswith(".weight")}
        return ",".join(sorted(d.lower() for d in weights)) or "none"


def _parse_marker(header: Header, entry: TensorEntry) -> dict[str, Any]:
    layer = entry.name[: -len(MARKER_SUFFIX)]
    if entry.dtype != "U8" or len(entry.shape) != 1:
        raise CorruptCheckpointError(
            header.path,
            f"comfy_quant marker must be a 1-D U8 tensor, got {entry.dtype} {list(entry.shape)}",
            layer=layer,
        )
    try:
        marker = json.loads(read_bytes(header, entry).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CorruptCheckpointError(
            header.path, f"comfy_quant marker is not valid JSON ({e})", layer=layer
        ) from e
    if not isinstance(marker, dict):
        raise CorruptCheckpointError(
            header.path, "comfy_quant marker is not a JSON object", layer=layer
        )
    if "format" not in marker:
        raise CorruptCheckpointError(
            header.path, "comfy_quant marker has no 'format' key", layer=layer
        )
    return marker


def _resolve_runtime(q: str | quant.QuantizationConfig | None) -> quant.QuantizationConfig | None:
    if q is None or isinstance(q, quant.QuantizationConfig):
        return q
    return quant.get_quantization_config(q)()


def inspect_checkpoint(
    path: str | os.PathLike[str],
    quantization: str | quant.QuantizationConfig | None = None,
) -> CheckpointInfo:
    """Validate header, metadata and markers of ``path`` against a runtime ``quantization``.

    ``quantization`` is a backend name (``"convrot_int8"``, alias ``"kitchen_int8"``, ``"fp8"``),
    a config instance, or None to follow the file.
    """
    header = read_header(path)
    p = header.path
    meta = header.metadata
    if "tinyav.config" not in meta:
        raise CheckpointError(p, "metadata lacks 'tinyav.config'; not a tinyav checkpoint")
    try:
        cfg = DiTConfig.from_json(meta["tinyav.config"])
    except (json.JSONDecodeError, TypeError) as e:
        raise CorruptCheckpointError(p, f"metadata 'tinyav.config' is invalid ({e})") from e
    variant = meta.get("tinyav.variant", cfg.variant)
    if variant != cfg.variant:
        raise CheckpointError(
            p, f"metadata variant {variant!r} disagrees with config variant {cfg.variant!r}"
        )

    markers: dict[str, dict[str, Any]] = {}
    for name, entry in header.tensors.items():
        if name.endswith(MARKER_SUFFIX):
            markers[name[: -len(MARKER_SUFFIX)]] = _parse_marker(header, entry)

    runtime = _resolve_runtime(quantization)
    layer_configs: dict[str, quant.QuantizationConfig] = {}
    for layer, marker in sorted(markers.items()):
        fmt = str(marker["format"])
        backend = quant.backend_for_format(fmt)
        if backend is None:
            raise UnsupportedFormatError(
                p, "unsupported serialized quantization format", layer=layer, fmt=fmt
            )
        _check_layout(header, layer, fmt)
        if runtime is not None:
            why = runtime.conflict(marker)
            if why:
                raise QuantConfigConflictError(p, why, layer=layer, fmt=fmt)
            layer_configs[layer] = runtime
        else:
            layer_configs[layer] = quant.get_quantization_config(backend).from_marker(marker)
    if runtime is not None and not markers:
        first = next(iter(sorted(n for n in header.tensors if n.endswith(".weight"))), None)
        raise QuantConfigConflictError(
            p,
            f"runtime quantization {runtime.name!r} requested but the file is not quantized "
            "(online quantization is not supported)",
            layer=None if first is None else first[: -len(".weight")],
            fmt="bf16",
        )
    for name, entry in header.tensors.items():
        # A quantized dtype without a marker would be upcast into a float Linear: refuse.
        layer = name.rsplit(".", 1)[0]
        if (
            entry.dtype not in FLOAT_DTYPES
            and not name.endswith(MARKER_SUFFIX)
            and layer not in markers
        ):
            raise CheckpointError(
                p,
                f"tensor {name!r} is {entry.dtype} but the layer has no comfy_quant marker",
                layer=layer,
            )
    return CheckpointInfo(header, cfg, variant, markers, layer_configs)


def _check_layout(header: Header, layer: str, fmt: str) -> None:
    for suffix, allowed in _LAYOUT.get(fmt, {}).items():
        entry = header.tensors.get(f"{layer}.{suffix}")
        if entry is None:
            raise MissingTensorError(
                header.path, f"missing '{layer}.{suffix}'", layer=layer, fmt=fmt
            )
        if entry.dtype not in allowed:
            raise CheckpointError(
                header.path,
                f"'{layer}.{suffix}' is {entry.dtype}, expected {sorted(allowed)}",
                layer=layer,
                fmt=fmt,
            )
    w = header.tensors[f"{layer}.weight"]
    s = header.tensors[f"{layer}.weight_scale"]
    if len(w.shape) != 2:
        raise CheckpointError(
            header.path, f"weight shape {list(w.shape)} is not 2-D", layer=layer, fmt=fmt
        )
    if fmt == "int8_tensorwise" and s.shape != (w.shape[0], 1):
        raise CheckpointError(
            header.path,
            f"weight_scale shape {list(s.shape)} != [{w.shape[0]}, 1]",
            layer=layer,
            fmt=fmt,
        )


def _install_offload(model: TinyDiT, device: torch.device) -> None:
    """Layerwise offload: blocks live on CPU and visit ``device`` only for their forward."""

    def to_device(mod: nn.Module, args: Any) -> None:
        mod.to(device)

    def back(mod: nn.Module, args: Any, out: Any) -> None:
        mod.to("cpu")

    for block in model.blocks:
        for mod in block.modules():
            kept = getattr(mod, "dequantized", None)
            if kept is not None:
                kept.enabled = False  # nothing of a block stays on the device between visits
        block.register_forward_pre_hook(to_device)
        block.register_forward_hook(back)


def load_dit(
    path: str | os.PathLike[str],
    *,
    quantization: str | quant.QuantizationConfig | None = None,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    offload: bool = False,
) -> TinyDiT:
    """Load a DiT checkpoint (bf16, INT8 ConvRot, FP8; full or pruned) through one path.

    Float tensors are cast to ``dtype``; quantized weights and their float32 scales are kept
    exactly as stored. With ``offload=True`` all tensors stay on CPU (layerwise offload moves
    each block to ``device`` for its forward only). Notes ``checkpoint.format``, the format
    detected from the file's markers and dtypes (:attr:`CheckpointInfo.format`).
    """
    info = inspect_checkpoint(path, quantization)
    p = info.header.path
    with torch.device("meta"):
        model = TinyDiT(info.config)
        for layer, qcfg in info.layer_configs.items():
            try:
                old = model.get_submodule(layer)
            except AttributeError as e:
                raise CheckpointError(
                    p, "marker names a layer the model does not have", layer=layer
                ) from e
            if not isinstance(old, nn.Linear):
                raise CheckpointError(p, "marker names a non-linear module", layer=layer)
            new = qcfg.make_linear(
                old.in_features, old.out_features, old.bias is not None, info.markers[layer]
            )
            parent, _, leaf = layer.rpartition(".")
            setattr(model.get_submodule(parent) if parent else model, leaf, new)
    model.requires_grad_(False)

    from safetensors import safe_open

    state: dict[str, torch.Tensor] = {}
    with safe_open(str(p), framework="pt", device="cpu") as f:
        for name in info.header.tensors:
            if name.endswith(MARKER_SUFFIX):
                continue  # metadata-only: never part of the module state dict
            state[name] = f.get_tensor(name)
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise CheckpointError(
            p, f"state dict mismatch: missing {missing[:5]}, unexpected {unexpected[:5]}"
        )
    quantized_modules = {layer for layer in info.layer_configs}
    for name, t in state.items():
        ref = expected[name]
        if tuple(t.shape) != tuple(ref.shape):
            raise CheckpointError(
                p,
                f"{name!r} has shape {list(t.shape)}, model expects {list(ref.shape)}",
                layer=name.rsplit(".", 1)[0],
            )
        if name.rsplit(".", 1)[0] not in quantized_modules or name.endswith(".bias"):
            state[name] = t.to(dtype)
    model.load_state_dict(state, strict=True, assign=True)
    model.eval()
    if not offload:
        model.to(device)
    elif torch.device(device).type != "cpu":
        _install_offload(model, torch.device(device))
    model.offload = offload  # type: ignore[assignment]
    probe.note("checkpoint.format", info.format)
    return model


def quantized_modules(model: nn.Module) -> dict[str, nn.Module]:
    """Modules holding serialized quantized weights (INT8 or FP8), by name."""
    return {n: m for n, m in model.named_modules() if hasattr(m, "weight_scale")}


def summary(info: CheckpointInfo) -> Mapping[str, Any]:
    """A JSON-ready digest of a checkpoint's header (for probe notes and reports)."""
    return {
        "variant": info.variant,
        "format": info.format,
        "formats": sorted(info.formats),
        "quantized_layers": len(info.markers),
        "tensors": len(info.header.tensors),
    }
