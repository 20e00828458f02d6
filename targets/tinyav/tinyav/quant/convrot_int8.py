"""INT8 ConvRot backend: per-row int8 weights, Hadamard-rotated where the width allows."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import torch
from torch import nn

from tinyav import dispatch
from tinyav.hadamard import GROUP_SIZE, applies, rotate_grouped
from tinyav.quant import QuantizationConfig
from tinyav.quant.reuse import DequantCache

FORMAT = "int8_tensorwise"


class ConvRotInt8Config(QuantizationConfig):
    """INT8 with ConvRot rotation of group ``groupsize`` (layers not divisible stay unrotated)."""

    name: ClassVar[str] = "convrot_int8"
    serialized_format: ClassVar[str] = FORMAT
    required_tensors: ClassVar[tuple[str, ...]] = ("weight", "weight_scale")

    def __init__(self, groupsize: int = GROUP_SIZE) -> None:
        self.groupsize = groupsize

    @classmethod
    def from_marker(cls, marker: Mapping[str, Any]) -> ConvRotInt8Config:
        return cls(int(marker.get("convrot_groupsize", GROUP_SIZE)))

    def conflict(self, marker: Mapping[str, Any]) -> str | None:
        base = super().conflict(marker)
        if base:
            return base
        if (
            marker.get("convrot")
            and int(marker.get("convrot_groupsize", GROUP_SIZE)) != self.groupsize
        ):
            return (
                f"runtime convrot_groupsize {self.groupsize} differs from serialized "
                f"{marker.get('convrot_groupsize')}"
            )
        return None

    def marker(self, in_features: int) -> dict[str, Any]:
        """The ``comfy_quant`` marker for a layer with ``in_features`` inputs."""
        rot = applies(in_features, self.groupsize)
        out: dict[str, Any] = {"format": FORMAT, "convrot": rot}
        if rot:
            out["convrot_groupsize"] = self.groupsize
        return out

    def make_linear(
        self, in_features: int, out_features: int, bias: bool, marker: Mapping[str, Any]
    ) -> Int8ConvRotLinear:
        rot = bool(marker.get("convrot", False))
        group = int(marker.get("convrot_groupsize", self.groupsize))
        return Int8ConvRotLinear(in_features, out_features, bias, convrot=rot, groupsize=group)


def quantize_weight(
    w: torch.Tensor, *, convrot: bool, groupsize: int = GROUP_SIZE
) -> tuple[torch.Tensor, torch.Tensor]:
    """float weight [out, in] -> (int8 [out, in], float32 scale [out, 1]), symmetric per row."""
    w = w.to(torch.float32)
    if convrot:
        w = rotate_grouped(w, groupsize)
    scale = w.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / 127.0
    q = (w / scale).round().clamp(-127, 127).to(torch.int8)
    return q, scale.to(torch.float32)


def dequantize_weight(
    q: torch.Tensor, scale: torch.Tensor, *, convrot: bool, groupsize: int = GROUP_SIZE
) -> torch.Tensor:
    """Inverse of :func:`quantize_weight` up to rounding, float32."""
    w = q.to(torch.float32) * scale
    return rotate_grouped(w, groupsize) if convrot else w


class Int8ConvRotLinear(nn.Module):
    """Linear layer whose int8 weight and float32 scale stay exactly as stored.

    They are buffers (never trained, never cast by ``module.to(dtype)`` helpers that skip
    quantized modules), dequantized in the activation dtype on the ``dequant_matmul`` path,
    and that weight kept while they stay unchanged (:mod:`tinyav.quant.reuse`).
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        *,
        convrot: bool,
        groupsize: int = GROUP_SIZE,
    ) -> None:
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.convrot = convrot
        self.groupsize = groupsize
        self.mm_path: dispatch.Int8Path = "dequant_matmul"
        self.dequantized = DequantCache()
        self.register_buffer("weight", torch.zeros(out_features, in_features, dtype=torch.int8))
        self.register_buffer("weight_scale", torch.ones(out_features, 1, dtype=torch.float32))
        self.bias: torch.Tensor | None
        if bias:
            self.register_buffer("bias", torch.zeros(out_features, dtype=torch.float32))
        else:
            self.bias = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dispatch.int8_linear(
            x,
            self.weight,
            self.weight_scale,
            self.bias,
            convrot=self.convrot,
            groupsize=self.groupsize,
            path=self.mm_path,
            dequantized=self._dequantized,
        )

    def _dequantized(self, compute: Callable[[], torch.Tensor], dtype: torch.dtype) -> torch.Tensor:
        return self.dequantized.get((self.weight, self.weight_scale), dtype, compute)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"convrot={self.convrot}, groupsize={self.groupsize}, path={self.mm_path}"
        )
