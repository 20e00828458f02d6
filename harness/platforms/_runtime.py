"""Helpers the torch-based platform modules share: a lazy torch import and device properties.

Nothing here imports torch at import time; :func:`import_torch` does, when a runtime question
(detection, identity, fingerprint) is asked.
"""

from __future__ import annotations

from typing import Any


def import_torch() -> Any:
    """torch, imported only when a runtime question is asked; None when not installed."""
    try:
        import torch
    except ImportError:
        return None
    return torch


def _num(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def device_properties(backend: Any, index: int) -> dict[str, Any]:
    """The readable, stable properties of device ``index`` of ``backend`` (``torch.cuda``,
    ``torch.npu``, ``torch.xpu``): name, total memory, multiprocessor count, L2 cache and
    clock where the runtime reports them; missing ones are left out, never guessed."""
    out: dict[str, Any] = {"index": index}
    try:
        props = backend.get_device_properties(index)
    except Exception as exc:  # a runtime without the call, or a device that cannot answer
        out["name"] = str(backend.get_device_name(index))
        out["reason"] = f"get_device_properties failed: {type(exc).__name__}: {exc}"
        return out
    out["name"] = str(getattr(props, "name", "") or backend.get_device_name(index))
    for key, attr in (
        ("memory_bytes", "total_memory"),
        ("multiprocessors", "multi_processor_count"),
        ("l2_cache_bytes", "L2_cache_size"),
        ("clock_khz", "clock_rate"),
        ("memory_clock_khz", "memory_clock_rate"),
        ("max_compute_units", "max_compute_units"),
    ):
        v = _num(getattr(props, attr, None))
        if v is not None:
            out[key] = v
    return out
