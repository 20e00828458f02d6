"""Helpers the torch-based platform modules share: a lazy torch import, torch's build, and
device properties.

Nothing here imports torch at import time; :func:`import_torch` does, when a runtime question
(detection, identity, fingerprint) is asked. :func:`torch_build` answers "what was this torch
built for" without importing it, so that a worker whose stack does not use torch (a runner
profile with ``preimport = []``) does not import it (~1 s of CPU) to learn that a CPU build
has no CUDA.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def import_torch() -> Any:
    """torch, imported only when a runtime question is asked; None when not installed."""
    try:
        import torch
    except ImportError:
        return None
    return torch


@dataclass(frozen=True)
class TorchBuild:
    """What torch was built for, as ``torch.version`` says: its version, and the CUDA, HIP and
    XPU toolkits it was compiled against (None: built without)."""

    version: str
    cuda: str | None
    hip: str | None
    xpu: str | None

    @property
    def accelerated(self) -> bool:
        """Built for a device runtime, which only the imported torch can say is usable."""
        return bool(self.cuda or self.hip or self.xpu)


def torch_build() -> TorchBuild | None:
    """torch's build; None when torch is not installed.

    Where this process has not imported torch, read from the ``torch/version.py`` that every
    torch build writes (literal assignments, parsed, never executed); where that file is
    missing or says something else, and where torch is imported already, from
    ``torch.version`` itself (importing torch).
    """
    if "torch" not in sys.modules:
        found = _build_from_version_file()
        if found is not None:
            return found
    torch = import_torch()
    if torch is None:
        return None
    version = getattr(torch, "version", None)
    return TorchBuild(
        version=str(getattr(torch, "__version__", "")),
        cuda=getattr(version, "cuda", None),
        hip=getattr(version, "hip", None),
        xpu=getattr(version, "xpu", None),
    )


def _build_from_version_file() -> TorchBuild | None:
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    values: dict[str, object] = {}
    for folder in spec.submodule_search_locations:
        try:
            tree = ast.parse((Path(folder) / "version.py").read_text(encoding="utf-8"))
        except (OSError, SyntaxError, ValueError):
            continue
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target, value = node.targets[0], node.value
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                target, value = node.target, node.value
            else:
                continue
            if isinstance(target, ast.Name) and isinstance(value, ast.Constant):
                values[target.id] = value.value
        break
    version = values.get("__version__")
    if not isinstance(version, str) or not {"cuda", "hip", "xpu"} <= values.keys():
        return None  # an older build whose file has no ``xpu`` field: ask the imported torch
    toolkits = [values.get(k) for k in ("cuda", "hip", "xpu")]
    if not all(v is None or isinstance(v, str) for v in toolkits):
        return None
    cuda, hip, xpu = (v if isinstance(v, str) else None for v in toolkits)
    return TorchBuild(version, cuda, hip, xpu)


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
