"""INT8 ConvRot for a diffusers transformer, applied from outside by a module swap.

The scheme of the seed threads (ComfyUI ``int8_tensorwise`` + ConvRot):

- each linear's weight ``[out, in]`` is rotated along its inputs, group by group, by a
  normalized Hadamard matrix ``H`` (symmetric and orthonormal, so ``H @ H == I`` and derotation
  is the same grouped matmul), then quantized symmetrically per output channel:
  ``weight`` int8 ``[out, in]``, ``weight_scale`` float32 ``[out, 1]``;
- the group is 256 where the width allows (``in % 256 == 0``), else the largest power of two
  that divides ``in`` (:func:`group_for`); a group of 1 means no rotation;
- every quantized layer carries ``<layer>.comfy_quant``, a 1-D uint8 tensor of UTF-8 JSON
  ``{"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 256}``.

:func:`swap_linears` replaces ``nn.Linear`` children of any module with
:class:`Int8ConvRotLinear`; diffusers' source is not touched. The matmul path is planned per
platform (:func:`plan_int8_mm`) and the path each call really took is counted in the module
(:attr:`Int8ConvRotLinear.ran`), so the decision and the execution are two facts.
"""

from __future__ import annotations

import functools
import json
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any, Literal

import torch
from torch import nn

FORMAT = "int8_tensorwise"
MARKER_SUFFIX = ".comfy_quant"
MAX_GROUP = 256

Int8Path = Literal["int_mm", "dequant_matmul"]


def group_for(in_features: int) -> int:
    """The ConvRot group for a layer of ``in_features`` inputs: 256 where it divides the width,
    else the largest power of two that does (``in & -in``), e.g. 48 -> 16, 32 -> 32, 7 -> 1."""
    if in_features <= 0:
        raise ValueError(f"in_features must be positive, got {in_features}")
    return MAX_GROUP if in_features % MAX_GROUP == 0 else in_features & -in_features


@functools.cache
def _hadamard_f64(n: int) -> torch.Tensor:
    if n < 1 or n & (n - 1):
        raise ValueError(f"hadamard size must be a power of two, got {n}")
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < n:  # Sylvester: [[H, H], [H, -H]] stays symmetric, H @ H = n I
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h / (n**0.5)


def hadamard(n: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The normalized Sylvester Hadamard matrix of size ``n`` (a power of two)."""
    return _hadamard_f64(n).to(dtype)


def rotate_grouped(x: torch.Tensor, group: int) -> torch.Tensor:
    """Multiply the last dimension of ``x`` group by group by ``hadamard(group)`` (float32)."""
    n = x.shape[-1]
    if group <= 1:
        return x
    if n % group:
        raise ValueError(f"last dimension {n} is not a multiple of the group size {group}")
    work = x.to(torch.float32)
    h = hadamard(group).to(work.device)
    return (work.reshape(*x.shape[:-1], n // group, group) @ h).reshape(x.shape)


def quantize_weight(w: torch.Tensor, group: int) -> tuple[torch.Tensor, torch.Tensor]:
    """float ``[out, in]`` -> (int8 ``[out, in]`` rotated by ``group``, float32 ``[out, 1]``)."""
    r = rotate_grouped(w.to(torch.float32), group)
    scale = r.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / 127.0
    q = (r / scale).round().clamp(-127, 127).to(torch.int8)
    return q, scale.to(torch.float32)


def dequantize_weight(q: torch.Tensor, scale: torch.Tensor, group: int) -> torch.Tensor:
    """Inverse of :func:`quantize_weight` up to rounding, float32 ``[out, in]``."""
    return rotate_grouped(q.to(torch.float32) * scale, group)


def marker(in_features: int) -> dict[str, Any]:
    """The ``comfy_quant`` marker of a layer with ``in_features`` inputs."""
    g = group_for(in_features)
    return {"format": FORMAT, "convrot": g > 1, "convrot_groupsize": g}


def encode_marker(m: Mapping[str, Any]) -> torch.Tensor:
    raw = json.dumps(dict(m), sort_keys=True).encode("utf-8")
    return torch.tensor(list(raw), dtype=torch.uint8)


def decode_marker(t: torch.Tensor) -> Any:
    """The JSON of a marker tensor (validation is the loader's job)."""
    return json.loads(bytes(t.to(torch.uint8).tolist()).decode("utf-8"))


def quantize_checkpoint(
    tensors: Mapping[str, torch.Tensor], layers: Iterable[str]
) -> dict[str, torch.Tensor]:
    """A ComfyUI checkpoint's tensors with each of ``layers`` (names without ``.weight``)
    stored INT8 ConvRot: int8 weight, float32 ``weight_scale`` ``[out, 1]``, marker; biases and
    every other tensor unchanged. A fused ``qkv`` quantizes row by row, so its q, k and v rows
    split exactly as the float rows do."""
    out = dict(tensors)
    for layer in layers:
        w = out[f"{layer}.weight"]
        if w.ndim != 2:
            raise ValueError(f"{layer}.weight is {list(w.shape)}, not a 2-D linear weight")
        q, scale = quantize_weight(w, group_for(w.shape[1]))
        out[f"{layer}.weight"], out[f"{layer}.weight_scale"] = q, scale
        out[f"{layer}{MARKER_SUFFIX}"] = encode_marker(marker(w.shape[1]))
    return dict(sorted(out.items()))


# -- dispatch ------------------------------------------------------------------------------------


def plan_int8_mm(platform: str | None, capabilities: Iterable[str] | None) -> Int8Path:
    """The INT8 matmul path for a platform: ``int_mm`` where it has an integer matmul kernel.

    ``capabilities`` is the platform identity's list (``probe.platform_info()``) when the
    harness provides one; without it, only CUDA with ``torch._int_mm`` is trusted to have it
    (a ROCm build reports device type ``cuda`` too, but the platform name says ``hip``).
    """
    if capabilities is not None:
        return "int_mm" if "int8_mm" in set(capabilities) else "dequant_matmul"
    return "int_mm" if platform == "cuda" and hasattr(torch, "_int_mm") else "dequant_matmul"


def int_mm_applies(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether ``torch._int_mm`` takes these tensors: CUDA (not HIP), >16 rows, dims % 8 == 0."""
    rows = x.numel() // max(x.shape[-1], 1)
    return (
        x.device.type == "cuda"
        and not getattr(torch.version, "hip", None)
        and rows > 16
        and weight.shape[0] % 8 == 0
        and weight.shape[1] % 8 == 0
    )


class Int8ConvRotLinear(nn.Module):
    """A linear whose int8 weight and float32 scale stay as stored (buffers, frozen).

    ``mm_path`` is the planned path; ``ran`` counts the path every forward really took (the
    plan falls back to ``dequant_matmul`` for tensors ``torch._int_mm`` cannot take).
    """

    weight: torch.Tensor
    weight_scale: torch.Tensor

    def __init__(self, in_features: int, out_features: int, bias: bool, group: int) -> None:
        super().__init__()
        self.in_features, self.out_features, self.group = in_features, out_features, group
        self.mm_path: Int8Path = "dequant_matmul"
        self.ran: Counter[str] = Counter()
        self.register_buffer("weight", torch.zeros(out_features, in_features, dtype=torch.int8))
        self.register_buffer("weight_scale", torch.ones(out_features, 1, dtype=torch.float32))
        self.bias: torch.Tensor | None
        if bias:
            self.register_buffer("bias", torch.zeros(out_features, dtype=torch.float32))
        else:
            self.bias = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bias = None if self.bias is None else self.bias.to(x.dtype)
        if self.mm_path == "int_mm" and int_mm_applies(x, self.weight):
            # (x H)(W H)^T == x W^T since H H == I: rotate the activations, not the weight.
            flat = rotate_grouped(x, self.group).reshape(-1, self.in_features).to(torch.float32)
            s_x = flat.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / 127.0
            xq = (flat / s_x).round().clamp(-127, 127).to(torch.int8)
            acc = torch._int_mm(xq, self.weight.t())
            y = (acc.to(torch.float32) * s_x * self.weight_scale.reshape(1, -1)).to(x.dtype)
            y = y.reshape(*x.shape[:-1], self.out_features)
            self.ran["int_mm"] += 1
            return y if bias is None else y + bias
        w = dequantize_weight(self.weight, self.weight_scale, self.group).to(x.dtype)
        self.ran["dequant_matmul"] += 1
        return nn.functional.linear(x, w, bias)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"group={self.group}, path={self.mm_path}"
        )


def swap_linears(model: nn.Module, groups: Mapping[str, int]) -> dict[str, Int8ConvRotLinear]:
    """Replace each ``nn.Linear`` named in ``groups`` (module name -> ConvRot group) by an
    :class:`Int8ConvRotLinear` of the same shape, in place; returns the new modules by name.

    Raises ``KeyError`` naming a layer the model lacks and ``TypeError`` for one that is not an
    ``nn.Linear``.
    """
    swapped: dict[str, Int8ConvRotLinear] = {}
    for name, group in groups.items():
        try:
            old = model.get_submodule(name)
        except AttributeError:
            raise KeyError(f"the model has no layer {name!r}") from None
        if not isinstance(old, nn.Linear):
            raise TypeError(f"{name!r} is a {type(old).__name__}, not an nn.Linear")
        new = Int8ConvRotLinear(old.in_features, old.out_features, old.bias is not None, group)
        parent, _, leaf = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, leaf, new)
        swapped[name] = new
    return swapped


def quantized_modules(model: nn.Module) -> dict[str, Int8ConvRotLinear]:
    return {n: m for n, m in model.named_modules() if isinstance(m, Int8ConvRotLinear)}


def set_path(model: nn.Module, path: Int8Path) -> None:
    """Point every INT8 module of ``model`` at ``path`` and reset its execution counts."""
    for mod in quantized_modules(model).values():
        mod.mm_path = path
        mod.ran.clear()


def executed(model: nn.Module) -> str:
    """The paths the INT8 modules of ``model`` took, sorted and comma-joined (``none``)."""
    paths: Counter[str] = Counter()
    for mod in quantized_modules(model).values():
        paths.update(mod.ran)
    return ",".join(sorted(paths)) or "none"
