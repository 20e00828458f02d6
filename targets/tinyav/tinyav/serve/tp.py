"""Megatron-style tensor parallelism for the DiT blocks: heads and MLP split across ranks.

Each rank loads the whole checkpoint, then keeps its slice of every block:

- self-attention: ``qkv_proj`` column-parallel by heads (rank r keeps heads
  ``[r*h/N, (r+1)*h/N)`` of q, k and v), attention over the local heads, ``out_proj``
  row-parallel (the matching input columns) followed by an ``all_reduce`` sum;
- cross-attention: ``q_proj`` and ``kv_proj`` column-parallel by heads, ``out_proj``
  row-parallel;
- MLP: ``fc1`` column-parallel, GELU on the local slice, ``fc2`` row-parallel.

A row-parallel layer adds its bias once, after the ``all_reduce``. Everything else (patch
projections, AdaLN, text encoder, decoders) stays replicated. Two collectives per
sub-layer, as in Megatron-LM; each output is the unsharded one up to the order of the
reduction (not bit-exact).

Quantized layers shard by slicing their stored tensors: per-row INT8 scales follow the rows of
a column split, FP8's tensorwise scales are shared. An INT8 layer rotated by ConvRot cannot be
split along its input columns (the rotation mixes a whole 256-wide group), so a row-parallel
ConvRot layer is dequantized once at load into a float shard: the same weights the
``dequant_matmul`` path computes per forward.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from tinyav.model import MLP, CrossAttention, DiTBlock, DiTConfig, SelfAttention, TinyDiT


class RowParallel(nn.Module):
    """``local`` (a slice of the input columns, no bias) then ``all_reduce``, then the bias."""

    def __init__(self, local: nn.Module, bias: torch.Tensor | None, group: Any) -> None:
        super().__init__()
        self.local = local
        self.group = group
        self.bias: torch.Tensor | None
        self.register_buffer("bias", None if bias is None else bias.detach().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        import torch.distributed as dist

        y = self.local(x).contiguous()
        dist.all_reduce(y, group=self.group)
        return y if self.bias is None else y + self.bias.to(y.dtype)


class _DequantLinear(nn.Module):
    """A float weight computed in the activation dtype, as the INT8 ``dequant_matmul`` does."""

    def __init__(self, weight: torch.Tensor) -> None:
        super().__init__()
        self.weight: torch.Tensor
        self.register_buffer("weight", weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight.to(x.dtype))


def _is_int8(layer: nn.Module) -> bool:
    return hasattr(layer, "mm_path") and hasattr(layer, "convrot")


def _is_fp8(layer: nn.Module) -> bool:
    return hasattr(layer, "to_platform") and hasattr(layer, "input_scale")


def _bias(layer: nn.Module) -> torch.Tensor | None:
    bias = getattr(layer, "bias", None)
    return None if bias is None else bias.detach()


def column_shard(layer: nn.Module, rows: torch.Tensor) -> nn.Module:
    """A copy of ``layer`` that computes only output ``rows`` (with their bias)."""
    out_features, in_features = len(rows), int(layer.in_features)  # type: ignore[arg-type]
    bias = _bias(layer)
    new: nn.Module
    if _is_int8(layer):
        from tinyav.quant.convrot_int8 import Int8ConvRotLinear

        new = Int8ConvRotLinear(
            in_features,
            out_features,
            bias is not None,
            convrot=bool(layer.convrot),
            groupsize=int(layer.groupsize),  # type: ignore[arg-type]
        )
        new.weight = layer.weight[rows].clone()  # type: ignore[index]
        new.weight_scale = layer.weight_scale[rows].clone()  # type: ignore[index]
        new.mm_path = layer.mm_path  # type: ignore[assignment]
    elif _is_fp8(layer):
        from tinyav.quant.fp8_scaled import Fp8Linear

        new = Fp8Linear(in_features, out_features, bias is not None)
        new.weight = layer.weight[rows].clone()  # type: ignore[index]
        new.weight_scale = layer.weight_scale.clone()  # type: ignore[operator]
        new.input_scale = layer.input_scale.clone()  # type: ignore[operator]
    elif isinstance(layer, nn.Linear):
        w = layer.weight
        new = nn.Linear(in_features, out_features, bias is not None, dtype=w.dtype)
        new.weight = nn.Parameter(w[rows].clone(), requires_grad=False)
    else:
        raise TypeError(f"cannot shard {type(layer).__name__}: not a linear layer")
    if bias is not None:
        sliced = bias[rows].clone()
        # A float Linear's bias is a parameter, a quantized layer's a buffer.
        new.bias = nn.Parameter(sliced, False) if isinstance(new, nn.Linear) else sliced
    return new


def row_shard(layer: nn.Module, start: int, stop: int, group: object) -> RowParallel:
    """``layer`` split along its inputs: this rank's columns ``[start, stop)`` plus a sum."""
    bias = _bias(layer)
    out_features = int(layer.out_features)  # type: ignore[arg-type]
    local: nn.Module
    if _is_int8(layer) and layer.convrot:
        from tinyav.quant.convrot_int8 import dequantize_weight

        w = dequantize_weight(
            layer.weight,  # type: ignore[arg-type]
            layer.weight_scale,  # type: ignore[arg-type]
            convrot=True,
            groupsize=int(layer.groupsize),  # type: ignore[arg-type]
        )
        local = _DequantLinear(w[:, start:stop].contiguous())
    elif _is_int8(layer):
        from tinyav.quant.convrot_int8 import Int8ConvRotLinear

        local = Int8ConvRotLinear(stop - start, out_features, False, convrot=False)
        local.weight = layer.weight[:, start:stop].contiguous()  # type: ignore[index]
        local.weight_scale = layer.weight_scale.clone()  # type: ignore[operator]
        local.mm_path = layer.mm_path  # type: ignore[assignment]
    elif _is_fp8(layer):
        from tinyav.quant.fp8_scaled import Fp8Linear

        local = Fp8Linear(stop - start, out_features, False)
        local.weight = layer.weight[:, start:stop].contiguous()  # type: ignore[index]
        local.weight_scale = layer.weight_scale.clone()  # type: ignore[operator]
        local.input_scale = layer.input_scale.clone()  # type: ignore[operator]
    elif isinstance(layer, nn.Linear):
        w = layer.weight
        local = nn.Linear(stop - start, out_features, False, dtype=w.dtype)
        local.weight = nn.Parameter(w[:, start:stop].contiguous(), requires_grad=False)
    else:
        raise TypeError(f"cannot shard {type(layer).__name__}: not a linear layer")
    return RowParallel(local, bias, group)


def _span(total: int, rank: int, world: int) -> tuple[int, int]:
    size = total // world
    return rank * size, (rank + 1) * size


class TPSelfAttention(nn.Module):
    """:class:`~tinyav.model.SelfAttention` over this rank's heads."""

    def __init__(self, full: SelfAttention, rank: int, world: int, group: object) -> None:
        super().__init__()
        d = full.out_proj.in_features
        self.heads = full.heads // world
        self.head_dim = d // full.heads
        lo, hi = _span(d, rank, world)
        cols = torch.arange(lo, hi)
        self.qkv_proj = column_shard(full.qkv_proj, torch.cat([cols, cols + d, cols + 2 * d]))
        self.out_proj = row_shard(full.out_proj, lo, hi, group)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        qkv = self.qkv_proj(x).reshape(b, n, 3, self.heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        out = F.scaled_dot_product_attention(q, k, v)
        return self.out_proj(out.transpose(1, 2).reshape(b, n, self.heads * self.head_dim))


class TPCrossAttention(nn.Module):
    """:class:`~tinyav.model.CrossAttention` over this rank's heads."""

    def __init__(self, full: CrossAttention, rank: int, world: int, group: object) -> None:
        super().__init__()
        d = full.out_proj.in_features
        self.heads = full.heads // world
        self.head_dim = d // full.heads
        lo, hi = _span(d, rank, world)
        cols = torch.arange(lo, hi)
        self.q_proj = column_shard(full.q_proj, cols)
        self.kv_proj = column_shard(full.kv_proj, torch.cat([cols, cols + d]))
        self.out_proj = row_shard(full.out_proj, lo, hi, group)

    def forward(self, x: torch.Tensor, ctx: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        h, hd = self.heads, self.head_dim
        q = self.q_proj(x).reshape(b, n, h, hd).transpose(1, 2)
        kv = self.kv_proj(ctx).reshape(b, ctx.shape[1], 2, h, hd)
        k, v = kv.permute(2, 0, 3, 1, 4).unbind(0)
        out = F.scaled_dot_product_attention(q, k, v)
        return self.out_proj(out.transpose(1, 2).reshape(b, n, h * hd))


class TPMLP(nn.Module):
    """:class:`~tinyav.model.MLP` with ``fc1`` column- and ``fc2`` row-parallel."""

    def __init__(self, full: MLP, rank: int, world: int, group: object) -> None:
        super().__init__()
        lo, hi = _span(full.fc1.out_features, rank, world)
        self.fc1 = column_shard(full.fc1, torch.arange(lo, hi))
        self.fc2 = row_shard(full.fc2, lo, hi, group)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh"))


def check_divisible(cfg: DiTConfig, world: int) -> None:
    """Refuse a rank count that does not divide the heads and the MLP width."""
    mlp = cfg.hidden * cfg.mlp_ratio
    if world < 1 or cfg.heads % world or mlp % world:
        raise ValueError(
            f"--tp {world}: the DiT has {cfg.heads} heads and an MLP of {mlp}; tp must divide both"
        )


def shard_dit(model: TinyDiT, rank: int, world: int, group: object = None) -> TinyDiT:
    """Replace every block's attention and MLP with this rank's tensor-parallel slice."""
    check_divisible(model.cfg, world)
    if world == 1:
        return model
    for block in model.blocks:
        assert isinstance(block, DiTBlock)
        block.attn = TPSelfAttention(block.attn, rank, world, group)  # type: ignore[assignment]
        block.cross_attn = TPCrossAttention(  # type: ignore[assignment]
            block.cross_attn, rank, world, group
        )
        block.mlp = TPMLP(block.mlp, rank, world, group)  # type: ignore[assignment]
    return model
