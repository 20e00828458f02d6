"""Deterministic single-file safetensors checkpoints of the DiT (no download).

Three formats, laid out like ComfyUI single files:

- ``bf16``: every tensor bfloat16.
- ``int8_convrot``: each quantized linear stores ``<layer>.weight`` int8 [out, in] (rotated by
  the grouped Hadamard when ``in % 256 == 0``), ``<layer>.weight_scale`` float32 [out, 1] and
  ``<layer>.comfy_quant``, a 1-D uint8 tensor of UTF-8 JSON such as
  ``{"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 256}``.
- ``fp8``: ``<layer>.weight`` float8_e4m3fn, float32 ``weight_scale`` and ``input_scale``
  (calibrated on one seeded forward), marker ``{"format": "float8_e4m3fn"}``.

File-level metadata: ``tinyav.variant``, ``tinyav.format``, ``tinyav.config`` (JSON),
``tinyav.seed``.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

from tinyav.fp8 import FN, cast_to_fp8, fp8_max
from tinyav.hadamard import GROUP_SIZE, applies
from tinyav.model import DiTConfig, TinyDiT, Variant, init_dit

Format = Literal["bf16", "int8_convrot", "fp8"]
FORMATS: tuple[Format, ...] = ("bf16", "int8_convrot", "fp8")
MARKER_SUFFIX = ".comfy_quant"


def quantizable_layers(model: TinyDiT) -> list[str]:
    """Names of the linears a quantized file stores quantized: every block linear plus the
    patch projections (whose 32/16 inputs are not multiples of 256, so they stay unrotated)."""
    names = ["video_patch_proj", "audio_patch_proj"]
    names += [
        n for n, m in model.named_modules() if n.startswith("blocks.") and isinstance(m, nn.Linear)
    ]
    return names


def encode_marker(marker: Mapping[str, Any]) -> torch.Tensor:
    """A ``comfy_quant`` marker as a 1-D uint8 tensor of UTF-8 JSON."""
    raw = json.dumps(dict(marker), sort_keys=True).encode("utf-8")
    return torch.tensor(list(raw), dtype=torch.uint8)


def decode_marker(t: torch.Tensor) -> dict[str, Any]:
    """Inverse of :func:`encode_marker` (no validation; the loader validates)."""
    return json.loads(bytes(t.tolist()).decode("utf-8"))


def _calibrate_input_amax(model: TinyDiT, layers: list[str], seed: int) -> dict[str, float]:
    """Per-layer max |input| over one seeded forward (static FP8 activation scales)."""
    amax: dict[str, float] = {}
    hooks = []
    for name in layers:

        def hook(mod: nn.Module, args: tuple[torch.Tensor, ...], name: str = name) -> None:
            amax[name] = max(amax.get(name, 0.0), float(args[0].abs().max()))

        hooks.append(model.get_submodule(name).register_forward_pre_hook(hook))
    cfg = model.cfg
    gen = torch.Generator().manual_seed(seed + 1)
    video = torch.randn(2, cfg.video_channels, 4, 8, 8, generator=gen)
    audio = torch.randn(2, cfg.audio_channels, 50, generator=gen)
    ctx = torch.randn(2, 16, cfg.text_dim, generator=gen)
    with torch.no_grad():
        model(video, audio, torch.tensor([1.0, 0.25]), ctx)
    for h in hooks:
        h.remove()
    return amax


def state_dict_for(model: TinyDiT, fmt: Format, seed: int = 0) -> dict[str, torch.Tensor]:
    """The tensors of a checkpoint of ``model`` in ``fmt`` (float32 model in, file dtypes out)."""
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {FORMATS}, got {fmt!r}")
    sd = {k: v.detach().to(torch.bfloat16).contiguous() for k, v in model.state_dict().items()}
    if fmt == "bf16":
        return sd
    # Imported here, not at module level: the loader imports this module for MARKER_SUFFIX and
    # must not pull in a quantization backend before a checkpoint asks for one.
    from tinyav.quant.convrot_int8 import quantize_weight

    layers = quantizable_layers(model)
    amax = _calibrate_input_amax(model, layers, seed) if fmt == "fp8" else {}
    for name in layers:
        w = model.get_submodule(name).weight.detach().to(torch.float32)
        if fmt == "int8_convrot":
            rot = applies(w.shape[1], GROUP_SIZE)
            q, scale = quantize_weight(w, convrot=rot, groupsize=GROUP_SIZE)
            marker: dict[str, Any] = {"format": "int8_tensorwise", "convrot": rot}
            if rot:
                marker["convrot_groupsize"] = GROUP_SIZE
            sd[f"{name}.weight"], sd[f"{name}.weight_scale"] = q, scale
        else:
            m = fp8_max(FN)
            w_scale = (w.abs().max().clamp(min=1e-12) / m).reshape(())
            sd[f"{name}.weight"] = cast_to_fp8(w / w_scale, FN)
            sd[f"{name}.weight_scale"] = w_scale.to(torch.float32)
            # 25 % headroom over the calibrated range before activations saturate.
            sd[f"{name}.input_scale"] = torch.tensor(max(amax[name], 1e-6) * 1.25 / m)
            marker = {"format": "float8_e4m3fn"}
        sd[f"{name}{MARKER_SUFFIX}"] = encode_marker(marker)
    return sd


# torch dtype -> safetensors dtype name
_ST_DTYPES = {
    torch.bool: "BOOL",
    torch.uint8: "U8",
    torch.int8: "I8",
    torch.int16: "I16",
    torch.int32: "I32",
    torch.int64: "I64",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.float32: "F32",
    torch.float64: "F64",
    torch.float8_e4m3fn: "F8_E4M3",
    torch.float8_e5m2: "F8_E5M2",
}


def save_safetensors(
    tensors: Mapping[str, torch.Tensor], path: str | os.PathLike[str], metadata: Mapping[str, str]
) -> None:
    """Write a safetensors file with a canonical header (sorted keys, compact JSON).

    The reference writer serializes ``__metadata__`` from a hash map, so its byte order varies
    between runs; CI needs the same bytes for the same checkpoint.
    """
    header: dict[str, Any] = {"__metadata__": dict(sorted(metadata.items()))}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        raw = t.reshape(-1).view(torch.uint8).numpy().tobytes()
        header[name] = {
            "dtype": _ST_DTYPES[t.dtype],
            "shape": list(t.shape),
            "data_offsets": [offset, offset + len(raw)],
        }
        blobs.append(raw)
        offset += len(raw)
    blob = json.dumps(header, separators=(",", ":")).encode("utf-8")
    blob += b" " * (-len(blob) % 8)  # align the data section to 8 bytes, as the format does
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for raw in blobs:
            f.write(raw)


def write_checkpoint(
    path: str | os.PathLike[str],
    fmt: Format = "bf16",
    *,
    variant: Variant = "full",
    seed: int = 0,
    config: DiTConfig | None = None,
) -> Path:
    """Write a deterministic DiT checkpoint; same arguments, same bytes. Returns the path.

    The file appears atomically (written under a temporary name, then renamed).
    """
    cfg = config or DiTConfig(variant=variant)
    if cfg.variant != variant:
        raise ValueError(f"config.variant {cfg.variant!r} disagrees with variant {variant!r}")
    model = init_dit(cfg, seed)
    tensors = state_dict_for(model, fmt, seed)
    metadata = {
        "format": "pt",
        "tinyav.variant": variant,
        "tinyav.format": fmt,
        "tinyav.config": cfg.to_json(),
        "tinyav.seed": str(seed),
    }
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.partial")
    save_safetensors(tensors, tmp, metadata)
    os.replace(tmp, out)
    return out


def reference_model(
    variant: Variant = "full", seed: int = 0, config: DiTConfig | None = None
) -> TinyDiT:
    """The float32 model a checkpoint written with the same arguments was made from."""
    return init_dit(config or DiTConfig(variant=variant), seed)
