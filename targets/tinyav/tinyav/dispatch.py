"""Per-platform kernel path selection.

Two decisions, each a pure function of the platform name (and torch capabilities), made once
per pipeline and reported through the probe so a case can assert which path ran:

- ``dispatch.int8_mm``: ``int_mm`` (CUDA ``torch._int_mm`` on rotated, per-token quantized
  activations) or ``dequant_matmul`` (dequantize the weight in the compute dtype, then matmul).
- ``dispatch.residual_gate``: ``fused_cuda`` (one ``addcmul`` kernel) or ``eager``. The fused
  path is CUDA-only and refuses tensors of any other platform: a ROCm/HIP build reports
  ``device.type == "cuda"`` too, which is exactly how CUDA-only fusions leak onto HIP.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch

from tinyav._probe import probe
from tinyav.errors import DispatchError

PLATFORMS = ("cpu", "cuda", "hip", "npu", "xpu", "mps")

Int8Path = Literal["int_mm", "dequant_matmul"]
GatePath = Literal["fused_cuda", "eager"]


def check_platform(platform: str) -> str:
    """Validate a platform name; returns it."""
    if platform not in PLATFORMS:
        raise DispatchError(f"unknown platform {platform!r}; expected one of {PLATFORMS}")
    return platform


def tensor_platform(t: torch.Tensor) -> str:
    """The platform a tensor lives on; HIP tensors say ``cuda`` in torch, so ask torch.version."""
    kind = t.device.type
    if kind == "cuda":
        return "hip" if getattr(torch.version, "hip", None) else "cuda"
    return kind if kind in PLATFORMS else "cpu"


def select_int8_mm(platform: str) -> Int8Path:
    """INT8 matmul path for ``platform``: ``int_mm`` only on CUDA with ``torch._int_mm``."""
    check_platform(platform)
    if platform == "cuda" and hasattr(torch, "_int_mm"):
        return "int_mm"
    return "dequant_matmul"


def select_residual_gate(platform: str) -> GatePath:
    """Residual-gate path: the fused kernel is CUDA-only; every other platform goes eager."""
    check_platform(platform)
    return "fused_cuda" if platform == "cuda" else "eager"


@dataclass(frozen=True)
class DispatchPlan:
    """The kernel paths chosen for one platform."""

    platform: str
    int8_mm: Int8Path
    residual_gate: GatePath

    def report(self) -> None:
        """Tell the probe which paths this plan takes."""
        probe.note("dispatch.platform", self.platform)
        probe.note("dispatch.int8_mm", self.int8_mm)
        probe.note("dispatch.residual_gate", self.residual_gate)


def plan(platform: str) -> DispatchPlan:
    """Choose every path for ``platform`` (one of :data:`PLATFORMS`)."""
    return DispatchPlan(platform, select_int8_mm(platform), select_residual_gate(platform))


# -- residual gate ---------------------------------------------------------------------------


def eager_residual_gate(x: torch.Tensor, gate: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``x + gate * y`` in plain ops; correct on every platform."""
    return x + gate * y


def fused_residual_gate(x: torch.Tensor, gate: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """CUDA-only fused ``x + gate * y``; raises :class:`DispatchError` for any other tensor."""
    for name, t in (("x", x), ("gate", gate), ("y", y)):
        where = tensor_platform(t)
        if where != "cuda":
            raise DispatchError(
                f"fused residual gate is CUDA-only but {name} is a {where} tensor "
                f"({t.device}); dispatch must choose the eager path there"
            )
    return torch.addcmul(x, gate, y)


def residual_gate_fn(
    path: GatePath,
) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]:
    """The function implementing ``path``."""
    return fused_residual_gate if path == "fused_cuda" else eager_residual_gate


# -- int8 matmul -----------------------------------------------------------------------------


def int8_linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    weight_scale: torch.Tensor,
    bias: torch.Tensor | None,
    *,
    convrot: bool,
    groupsize: int,
    path: Int8Path,
) -> torch.Tensor:
    """``x @ dequant(weight).T + bias`` by the chosen path.

    ``weight`` int8 [out, in] (rotated when ``convrot``), ``weight_scale`` float32 [out, 1].
    """
    from tinyav.hadamard import rotate_grouped

    if path == "int_mm" and _int_mm_ok(x, weight):
        # Rotating activations instead of weights: (x H)(W H)^T == x W^T since H H == I.
        xs = rotate_grouped(x, groupsize) if convrot else x
        flat = xs.reshape(-1, xs.shape[-1]).to(torch.float32)
        s_x = flat.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / 127.0
        xq = (flat / s_x).round().clamp(-127, 127).to(torch.int8)
        acc = torch._int_mm(xq, weight.t())
        y = (acc.to(torch.float32) * s_x * weight_scale.reshape(1, -1)).to(x.dtype)
        y = y.reshape(*x.shape[:-1], weight.shape[0])
        return y + bias.to(x.dtype) if bias is not None else y
    w = weight.to(torch.float32) * weight_scale
    if convrot:
        w = rotate_grouped(w, groupsize)  # derotation is the same grouped matmul
    return torch.nn.functional.linear(x, w.to(x.dtype), None if bias is None else bias.to(x.dtype))


def _int_mm_ok(x: torch.Tensor, weight: torch.Tensor) -> bool:
    # torch._int_mm needs CUDA tensors, more than 16 rows and dims that are multiples of 8.
    rows = x.numel() // x.shape[-1]
    return (
        tensor_platform(x) == "cuda"
        and rows > 16
        and weight.shape[0] % 8 == 0
        and weight.shape[1] % 8 == 0
    )


def apply(
    model: torch.nn.Module,
    chosen: DispatchPlan,
    arch: str | None = None,
    fp8_platform: str | None = None,
) -> None:
    """Point every module of ``model`` at the paths of ``chosen``.

    ``fp8_platform`` overrides the platform whose float8 flavour FP8 layers adopt (to run
    MI300 numerics on a CPU runner); by default it is ``chosen.platform``.

    Duck-typed so this module imports no backend: modules with ``mm_path`` take the INT8 path,
    modules with ``to_platform`` normalize their FP8 flavour, modules with ``residual_gate``
    take the gate function.
    """
    gate = residual_gate_fn(chosen.residual_gate)
    for mod in model.modules():
        if hasattr(mod, "mm_path"):
            mod.mm_path = chosen.int8_mm
        if hasattr(mod, "to_platform"):
            mod.to_platform(fp8_platform or chosen.platform, arch)
        if hasattr(mod, "residual_gate"):
            mod.residual_gate = gate
