"""Scaled FP8 backend: float8 weights with tensorwise float32 weight and input scales."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import torch
from torch import nn

from tinyav.fp8 import FN, FNUZ, cast_to_fp8, fp8_dtype_for, normalize_e4m3fn_to_e4m3fnuz
from tinyav.quant import QuantizationConfig
from tinyav.quant.reuse import DequantCache

FORMAT = "float8_e4m3fn"


class Fp8Config(QuantizationConfig):
    """Serialized e4m3fn, computed in the platform's flavour (:func:`tinyav.fp8.fp8_dtype_for`)."""

    name: ClassVar[str] = "fp8"
    serialized_format: ClassVar[str] = FORMAT
    required_tensors: ClassVar[tuple[str, ...]] = ("weight", "weight_scale", "input_scale")

    def marker(self, in_features: int) -> dict[str, Any]:
        """The ``comfy_quant`` marker of an FP8 layer."""
        return {"format": FORMAT}

    def make_linear(
        self, in_features: int, out_features: int, bias: bool, marker: Mapping[str, Any]
    ) -> Fp8Linear:
        return Fp8Linear(in_features, out_features, bias)


class Fp8Linear(nn.Module):
    """Linear with a float8 weight, static input quantization and dequantize-then-matmul."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True) -> None:
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.register_buffer("weight", torch.zeros(out_features, in_features, dtype=FN))
        self.register_buffer("weight_scale", torch.ones((), dtype=torch.float32))
        self.register_buffer("input_scale", torch.ones((), dtype=torch.float32))
        self.dequantized = DequantCache()  # the weight in the compute dtype, while unchanged
        self.bias: torch.Tensor | None
        if bias:
            self.register_buffer("bias", torch.zeros(out_features, dtype=torch.float32))
        else:
            self.bias = None

    @property
    def flavour(self) -> torch.dtype:
        """The float8 dtype the weight is currently held in."""
        return self.weight.dtype

    def to_platform(
        self, platform: str, arch: str | None = None, *, dtype: torch.dtype | None = None
    ) -> None:
        """Normalize the stored e4m3fn weight to the platform's flavour (once, in place);
        ``dtype`` (a flavour the caller already knows) wins over ``platform``/``arch``."""
        want = dtype if dtype is not None else fp8_dtype_for(platform, arch)
        if want == FNUZ and self.weight.dtype == FN:
            w, ws, xs = normalize_e4m3fn_to_e4m3fnuz(
                self.weight, self.weight_scale, self.input_scale
            )
            self.weight, self.weight_scale, self.input_scale = w, ws, xs  # type: ignore[assignment]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Static activation quantization in the weight's flavour (saturating, never NaN).
        xq = cast_to_fp8(x / self.input_scale, self.weight.dtype)
        xd = (xq.to(torch.float32) * self.input_scale).to(x.dtype)
        w = self.dequantized.get(
            (self.weight, self.weight_scale),
            x.dtype,
            lambda: (self.weight.to(torch.float32) * self.weight_scale).to(x.dtype),
        )
        return nn.functional.linear(xd, w, None if self.bias is None else self.bias.to(x.dtype))
