"""A tiny seeded diffusers Wan transformer, and a ComfyUI-style single file of it.

The file is laid out as ComfyUI and the original Wan repository store the transformer, which is
what the loaders of the seed threads receive (not diffusers' own names):

- every key under ``model.diffusion_model.``;
- self-attention fused: ``blocks.N.self_attn.qkv.{weight,bias}`` holds the q, k and v rows
  stacked in that order (``[3 * inner, inner]``); cross-attention ``cross_attn.{q,k,v,o}``;
- Wan's own names: ``self_attn.o``, ``norm3`` (the affine cross-attention norm diffusers calls
  ``norm2``), ``ffn.0``/``ffn.2``, ``modulation``, ``time_embedding.0``/``.2``,
  ``time_projection.1``, ``text_embedding.0``/``.2``, ``head.head``, ``head.modulation``.

This writer spells the layout out on its own, independently of :mod:`.loader`, so that a wrong
rename or split in the loader cannot be cancelled by the same mistake here: the loader's result
is judged against :func:`build_wan`'s ``state_dict``, never against this file.

Example::

    model = build_wan(TINY_WAN, seed=0)
    write_checkpoint(tmp / "wan.safetensors", comfy_state_dict(model))
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import torch
from torch import nn

PREFIX = "model.diffusion_model."

# 2 layers, 3 heads of 16 (inner 48): every width is tiny, and the block linears meet both
# branches of the ConvRot group rule: the FFN's 256 wide hidden layer takes group 256, the 48
# wide inputs of attention and FFN group 16 (the largest power of two dividing 48). The FFN is
# not square, so a transposed FFN weight has a shape the model cannot take.
TINY_WAN: dict[str, Any] = {
    "patch_size": (1, 2, 2),
    "num_attention_heads": 3,
    "attention_head_dim": 16,
    "in_channels": 4,
    "out_channels": 4,
    "text_dim": 32,
    "freq_dim": 16,
    "ffn_dim": 256,
    "num_layers": 2,
    "cross_attn_norm": True,
    "qk_norm": "rms_norm_across_heads",
    "rope_max_seq_len": 1024,
}


def quantizable_layers(tensors: Mapping[str, torch.Tensor]) -> list[str]:
    """The ComfyUI layers an INT8 file stores quantized: every 2-D linear weight of the blocks
    and the output head. The condition embedder stays float, as in ComfyUI's files; diffusers
    also reads its time embedder's parameter dtype, which a buffer-only INT8 module lacks."""
    return sorted(
        k.removesuffix(".weight")
        for k, v in tensors.items()
        if k.endswith(".weight") and v.ndim == 2 and (".blocks." in k or ".head.head." in k)
    )


def build_wan(config: Mapping[str, Any] | None = None, seed: int = 0) -> nn.Module:
    """A ``WanTransformer3DModel`` from ``config`` (default :data:`TINY_WAN`), seeded.

    Every tensor is redrawn from one generator seeded with ``seed``, in sorted-name order, so
    two processes build identical weights and no two tensors are alike (diffusers initializes
    norms to ones and some biases to zeros, which would let a swap of two of them pass
    unnoticed). Weights are drawn with std ``1/sqrt(fan_in)``, norm weights near one, the rest
    small, so a forward stays in a sane range.
    """
    from diffusers import WanTransformer3DModel

    model = cast(nn.Module, WanTransformer3DModel(**dict(config or TINY_WAN)))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, t in sorted(model.state_dict(keep_vars=True).items()):
            if not t.is_floating_point():
                continue
            noise = torch.randn(t.shape, generator=gen, dtype=torch.float32)
            if t.ndim >= 2 and name.endswith("weight"):
                value = noise / math.sqrt(math.prod(t.shape[1:]))
            elif name.endswith("weight") and ".norm" in name:
                value = 1.0 + 0.1 * noise
            else:
                value = 0.1 * noise
            t.copy_(value.to(t.dtype))
    return model.eval().requires_grad_(False)


# diffusers name -> ComfyUI / Wan name, for the tensors outside the blocks.
_GLOBAL = {
    "patch_embedding": "patch_embedding",
    "condition_embedder.time_embedder.linear_1": "time_embedding.0",
    "condition_embedder.time_embedder.linear_2": "time_embedding.2",
    "condition_embedder.time_proj": "time_projection.1",
    "condition_embedder.text_embedder.linear_1": "text_embedding.0",
    "condition_embedder.text_embedder.linear_2": "text_embedding.2",
    "proj_out": "head.head",
    "scale_shift_table": "head.modulation",
}
# Inside a block (``blocks.N.``): diffusers -> ComfyUI / Wan.
_BLOCK = {
    "scale_shift_table": "modulation",
    "attn1.to_out.0": "self_attn.o",
    "attn1.norm_q": "self_attn.norm_q",
    "attn1.norm_k": "self_attn.norm_k",
    "attn2.to_q": "cross_attn.q",
    "attn2.to_k": "cross_attn.k",
    "attn2.to_v": "cross_attn.v",
    "attn2.to_out.0": "cross_attn.o",
    "attn2.norm_q": "cross_attn.norm_q",
    "attn2.norm_k": "cross_attn.norm_k",
    "norm2": "norm3",
    "ffn.net.0.proj": "ffn.0",
    "ffn.net.2": "ffn.2",
}


def comfy_name(key: str) -> str:
    """The ComfyUI name of diffusers tensor ``key`` (not for the fused q, k, v)."""
    try:
        if key in _GLOBAL:  # a bare parameter (scale_shift_table)
            return PREFIX + _GLOBAL[key]
        if not key.startswith("blocks."):
            module, _, leaf = key.rpartition(".")
            return f"{PREFIX}{_GLOBAL[module]}.{leaf}"
        _, n, inner = key.split(".", 2)
        if inner in _BLOCK:  # a bare block parameter (modulation)
            return f"{PREFIX}blocks.{n}.{_BLOCK[inner]}"
        module, _, leaf = inner.rpartition(".")
        return f"{PREFIX}blocks.{n}.{_BLOCK[module]}.{leaf}"
    except KeyError:
        raise KeyError(f"no ComfyUI name for diffusers tensor {key!r}") from None


def comfy_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """``model``'s tensors under ComfyUI names, self-attention q, k, v fused into ``qkv``."""
    sd = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    out: dict[str, torch.Tensor] = {}
    fused: dict[str, dict[str, torch.Tensor]] = {}
    for key, t in sd.items():
        parts = key.split(".")
        if len(parts) == 5 and parts[0] == "blocks" and parts[2] == "attn1":
            proj, leaf = parts[3], parts[4]
            if proj in ("to_q", "to_k", "to_v"):
                fused.setdefault(f"{PREFIX}blocks.{parts[1]}.self_attn.qkv.{leaf}", {})[proj] = t
                continue
        out[comfy_name(key)] = t
    for key, parts_by_proj in fused.items():
        out[key] = torch.cat([parts_by_proj[p] for p in ("to_q", "to_k", "to_v")], dim=0)
    return dict(sorted(out.items()))


def write_checkpoint(
    path: str | os.PathLike[str],
    tensors: Mapping[str, torch.Tensor],
    metadata: Mapping[str, str] | None = None,
) -> Path:
    """Write ``tensors`` as one safetensors file (atomically: a temporary name, then renamed)."""
    from safetensors.torch import save_file

    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.partial")
    save_file(
        {k: v.contiguous() for k, v in tensors.items()},
        str(tmp),
        metadata=dict(metadata or {"format": "pt"}),
    )
    os.replace(tmp, out)
    return out
