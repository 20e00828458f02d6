"""Per-platform kernel path selection, and a record of the paths that really executed.

Two decisions, each a pure function of the platform and its capabilities, made once per
pipeline. Under the harness the capabilities come from the attempt's platform identity
(``probe.platform_info()``: ``int8_mm``, ``fused_kernels``), so a simulated CUDA plans CUDA's
paths on a CPU; standalone they follow the platform name and torch (:func:`identity_for`
returns None there):

- ``int8_mm``: ``int_mm`` (CUDA ``torch._int_mm`` on rotated, per-token quantized
  activations) or ``dequant_matmul`` (dequantize the weight in the compute dtype, then matmul).
- ``residual_gate``: ``fused_cuda`` (one ``addcmul`` kernel) or ``eager``. The fused
  path is CUDA-only and refuses tensors of any other platform: a ROCm/HIP build reports
  ``device.type == "cuda"`` too, which is exactly how CUDA-only fusions leak onto HIP.

A plan is not what runs: :func:`int8_linear` falls back to ``dequant_matmul`` whenever the
tensors in hand do not suit ``torch._int_mm`` (not CUDA, 16 rows or fewer, dims not multiples
of 8). So the two facts are reported apart: :meth:`DispatchPlan.report` notes the decision
(``dispatch.<op>.plan``), and :func:`recording` counts, at the point of execution, the path each
call really took (``dispatch.<op>.ran``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from tinyav._probe import probe
from tinyav.errors import DispatchError

PLATFORMS = ("cpu", "cuda", "hip", "npu", "xpu", "mps")

Int8Path = Literal["int_mm", "dequant_matmul"]
GatePath = Literal["fused_cuda", "eager"]
Op = Literal["int8_mm", "residual_gate"]
OPS: tuple[Op, ...] = ("int8_mm", "residual_gate")


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


def identity_for(platform: str) -> Mapping[str, Any] | None:
    """The harness's identity of ``platform`` for this attempt (arch, fp8 flavour,
    capabilities, simulated), or None standalone or when the attempt is for another platform."""
    info = probe.platform_info() if hasattr(probe, "platform_info") else None
    if info is None or info.get("platform") != platform:
        return None
    return info


def select_int8_mm(platform: str, capabilities: Collection[str] | None = None) -> Int8Path:
    """INT8 matmul path for ``platform``: ``int_mm`` only on CUDA with the ``int8_mm``
    capability (standalone, without ``capabilities``: with ``torch._int_mm``)."""
    check_platform(platform)
    can = "int8_mm" in capabilities if capabilities is not None else hasattr(torch, "_int_mm")
    return "int_mm" if platform == "cuda" and can else "dequant_matmul"


def select_residual_gate(platform: str, capabilities: Collection[str] | None = None) -> GatePath:
    """Residual-gate path: the fused kernel is CUDA-only (and, with ``capabilities``, needs
    ``fused_kernels``); every other platform goes eager, HIP included."""
    check_platform(platform)
    can = capabilities is None or "fused_kernels" in capabilities
    return "fused_cuda" if platform == "cuda" and can else "eager"


@dataclass(frozen=True)
class DispatchPlan:
    """The kernel paths chosen for one platform."""

    platform: str
    int8_mm: Int8Path
    residual_gate: GatePath

    def report(self) -> None:
        """Tell the probe which paths this plan chose (``dispatch.<op>.plan``)."""
        probe.note("dispatch.platform", self.platform)
        probe.note("dispatch.int8_mm.plan", self.int8_mm)
        probe.note("dispatch.residual_gate.plan", self.residual_gate)


def plan(platform: str, capabilities: Collection[str] | None = None) -> DispatchPlan:
    """Choose every path for ``platform`` (one of :data:`PLATFORMS`), from ``capabilities``
    when given (the harness identity's), else from the name and torch."""
    return DispatchPlan(
        platform,
        select_int8_mm(platform, capabilities),
        select_residual_gate(platform, capabilities),
    )


# -- what executed -----------------------------------------------------------------------------


@dataclass
class Executed:
    """How many calls of each op took each path while :func:`recording` was active."""

    counts: dict[Op, Counter[str]] = field(default_factory=lambda: {op: Counter() for op in OPS})

    def ran(self, op: Op) -> str:
        """The paths ``op`` executed, sorted and comma-joined (``"none"`` if it never ran)."""
        return ",".join(sorted(self.counts[op])) or "none"

    def report(self) -> None:
        """Tell the probe which paths executed (``dispatch.<op>.ran``)."""
        for op in OPS:
            probe.note(f"dispatch.{op}.ran", self.ran(op))


_recorders: ContextVar[tuple[Executed, ...]] = ContextVar("tinyav_dispatch_recorders", default=())


@contextmanager
def recording() -> Iterator[Executed]:
    """Count the path every dispatched call really takes inside the ``with`` block.

    >>> with recording() as ran:                      # doctest: +SKIP
    ...     model(x)
    >>> ran.ran("int8_mm")                            # doctest: +SKIP
    'dequant_matmul'
    """
    rec = Executed()
    token = _recorders.set((*_recorders.get(), rec))
    try:
        yield rec
    finally:
        _recorders.reset(token)


def _executed(op: Op, path: str) -> None:
    for rec in _recorders.get():
        rec.counts[op][path] += 1


# -- residual gate ---------------------------------------------------------------------------


def eager_residual_gate(x: torch.Tensor, gate: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``x + gate * y`` in plain ops; correct on every platform."""
    out = x + gate * y
    _executed("residual_gate", "eager")
    return out


def fused_residual_gate(x: torch.Tensor, gate: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """CUDA-only fused ``x + gate * y``; raises :class:`DispatchError` for any other tensor."""
    for name, t in (("x", x), ("gate", gate), ("y", y)):
        where = tensor_platform(t)
        if where != "cuda":
            raise DispatchError(
                f"fused residual gate is CUDA-only but {name} is a {where} tensor "
                f"({t.device}); dispatch must choose the eager path there"
            )
    out = torch.addcmul(x, gate, y)
    _executed("residual_gate", "fused_cuda")
    return out


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
    dequantized: Callable[[Callable[[], torch.Tensor], torch.dtype], torch.Tensor] | None = None,
) -> torch.Tensor:
    """``x @ dequant(weight).T + bias`` by the chosen path, where the tensors allow it.

    ``weight`` int8 [out, in] (rotated when ``convrot``), ``weight_scale`` float32 [out, 1].
    ``path="int_mm"`` falls back to ``dequant_matmul`` for tensors ``torch._int_mm`` cannot
    take (see :func:`int_mm_applies`); the path taken is counted for :func:`recording`.
    ``dequantized(compute, dtype)``, when given, supplies ``dequant_matmul``'s weight in
    ``dtype``, from ``compute()`` or from a weight it kept (the layer's
    :class:`~tinyav.quant.reuse.DequantCache`).
    """
    from tinyav.hadamard import rotate_grouped

    if path == "int_mm" and int_mm_applies(x, weight):
        # Rotating activations instead of weights: (x H)(W H)^T == x W^T since H H == I.
        xs = rotate_grouped(x, groupsize) if convrot else x
        flat = xs.reshape(-1, xs.shape[-1]).to(torch.float32)
        s_x = flat.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / 127.0
        xq = (flat / s_x).round().clamp(-127, 127).to(torch.int8)
        acc = torch._int_mm(xq, weight.t())
        y = (acc.to(torch.float32) * s_x * weight_scale.reshape(1, -1)).to(x.dtype)
        y = y.reshape(*x.shape[:-1], weight.shape[0])
        _executed("int8_mm", "int_mm")
        return y + bias.to(x.dtype) if bias is not None else y

    def compute() -> torch.Tensor:
        w = weight.to(torch.float32) * weight_scale
        if convrot:
            w = rotate_grouped(w, groupsize)  # derotation is the same grouped matmul
        return w.to(x.dtype)

    w = compute() if dequantized is None else dequantized(compute, x.dtype)
    out = torch.nn.functional.linear(x, w, None if bias is None else bias.to(x.dtype))
    _executed("int8_mm", "dequant_matmul")
    return out


def int_mm_applies(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether ``torch._int_mm`` can take activations ``x`` [..., in] and int8 ``weight``.

    It needs CUDA tensors, more than 16 rows and dims that are multiples of 8.
    """
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
    *,
    fp8_dtype: torch.dtype | None = None,
    execute_on: str | None = None,
) -> None:
    """Point every module of ``model`` at the paths of ``chosen``.

    ``fp8_platform`` overrides the platform whose float8 flavour FP8 layers adopt (to run
    MI300 numerics on a CPU runner); by default it is ``chosen.platform``. ``fp8_dtype`` (the
    harness identity's flavour) wins over both. ``execute_on`` is the platform whose tensors
    really run, when it is not the planned one (a simulated platform): a fused CUDA kernel
    cannot run there, so the gate executes eagerly while the plan stays CUDA's (the two
    facts ``.plan`` and ``.ran`` then differ, as they must).

    Duck-typed so this module imports no backend: modules with ``mm_path`` take the INT8 path,
    modules with ``to_platform`` normalize their FP8 flavour, modules with ``residual_gate``
    take the gate function.
    """
    gate_path = chosen.residual_gate
    if execute_on is not None and execute_on != "cuda":
        gate_path = "eager"
    gate = residual_gate_fn(gate_path)
    for mod in model.modules():
        if hasattr(mod, "mm_path"):
            mod.mm_path = chosen.int8_mm
        if hasattr(mod, "to_platform"):
            mod.to_platform(fp8_platform or chosen.platform, arch, dtype=fp8_dtype)
        if hasattr(mod, "residual_gate"):
            mod.residual_gate = gate
