"""float8 flavours: OCP ``float8_e4m3fn`` and AMD MI300's ``float8_e4m3fnuz``.

Checkpoints are serialized in e4m3fn. MI300-class HIP devices compute in e4m3fnuz, whose
exponent bias is one larger: the same bit pattern means half the value, and 0x80 (e4m3fn's
negative zero) is NaN there. Normalization therefore reinterprets the bits, maps 0x80 to
zero and doubles the scales. e4m3fnuz has no infinities and overflows to NaN on cast (max 240
vs 448), so every cast into it clamps first.
"""

from __future__ import annotations

import torch

FN = torch.float8_e4m3fn
FNUZ = torch.float8_e4m3fnuz

# MI300-class (CDNA3) targets; MI350 (gfx950) moved to OCP e4m3fn.
_FNUZ_ARCHS = ("gfx940", "gfx941", "gfx942")


def fp8_dtype_for(platform: str, arch: str | None = None) -> torch.dtype:
    """The float8 dtype to compute in on ``platform``.

    ``hip`` means e4m3fnuz when ``arch`` is MI300-class or unknown (MI300 is the HIP class we
    serve); every other platform, and HIP archs outside MI300, use e4m3fn.
    """
    if platform == "hip" and (arch is None or arch.split(":")[0] in _FNUZ_ARCHS):
        return FNUZ
    return FN


def fp8_dtype_named(flavour: str | None) -> torch.dtype | None:
    """The dtype of an FP8 flavour name (``e4m3fn``, ``e4m3fnuz``, as the harness's platform
    identity gives it); None for None (no FP8 hardware: the platform's default applies)."""
    if flavour is None:
        return None
    dtypes = {"e4m3fn": FN, "e4m3fnuz": FNUZ}
    if flavour not in dtypes:
        raise ValueError(f"unknown FP8 flavour {flavour!r}; expected one of {sorted(dtypes)}")
    return dtypes[flavour]


def fp8_max(dtype: torch.dtype) -> float:
    """Largest finite value of a float8 dtype."""
    return float(torch.finfo(dtype).max)


def cast_to_fp8(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Saturating cast: clamp to the finite range first (fnuz would turn overflow into NaN)."""
    m = fp8_max(dtype)
    return x.to(torch.float32).clamp(-m, m).to(dtype)


def normalize_e4m3fn_to_e4m3fnuz(
    weight: torch.Tensor,
    weight_scale: torch.Tensor,
    input_scale: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Reinterpret e4m3fn weights as e4m3fnuz with doubled scales; dequantized values unchanged.

    >>> w = torch.tensor([1.0, -0.0]).to(FN)
    >>> q, s, _ = normalize_e4m3fn_to_e4m3fnuz(w, torch.tensor(1.0))
    >>> (q.float() * s).tolist()
    [1.0, 0.0]
    """
    if weight.dtype != FN:
        raise TypeError(f"weight must be float8_e4m3fn, got {weight.dtype}")
    bits = weight.view(torch.int8).clone()
    bits[bits == -128] = 0  # 0x80: -0 in e4m3fn, NaN in e4m3fnuz
    w = bits.view(FNUZ)
    doubled_input = None if input_scale is None else input_scale * 2.0
    return w, weight_scale * 2.0, doubled_input
