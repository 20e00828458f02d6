"""Helpers every scenario module shares. Imports nothing heavy at import time (torch is imported
inside the functions), so a cold-import scenario can import this package honestly."""

from __future__ import annotations

import importlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tinyav._probe import probe

# The platforms tinyav claims; kept in step with ``tinyav.dispatch.PLATFORMS`` (a test checks)
# without importing it, because that imports torch.
PLATFORMS = ("cpu", "cuda", "hip", "npu", "xpu", "mps")


def resolve_seed(seed: int | None) -> int:
    """The attempt's seed from the probe when running under the harness, else ``seed`` (or 0)."""
    s = probe.seed()
    return int(s) if s is not None else int(seed or 0)


@contextmanager
def workdir(path: str | None) -> Iterator[Path]:
    """A working directory: ``path`` if given (kept), else a fresh temp dir (removed)."""
    if path is not None:
        kept = Path(path)
        kept.mkdir(parents=True, exist_ok=True)
        yield kept
        return
    tmp = Path(tempfile.mkdtemp(prefix="tinyav-"))
    try:
        yield tmp
    finally:
        # probe.output copies files into the run at call time, so the temp dir can go.
        shutil.rmtree(tmp, ignore_errors=True)


def init_torch() -> None:
    """Pin torch's intra-op threads (``TINYAV_NUM_THREADS``, default 1).

    The model is tiny, so one thread is as fast as two when the machine is idle, and on a
    shared 2-core runner two OpenMP threads competing with other processes were measured 20x
    to 100x slower (spin-waiting barriers). Pinning also keeps reduction order, hence output
    bits, independent of the machine's core count.
    """
    import torch

    n = int(os.environ.get("TINYAV_NUM_THREADS", "1"))
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)


def device_for(platform: str) -> str:
    """The torch device that really runs ``platform`` here; ``"cpu"`` when it is absent.

    - ``cuda``: ``torch.cuda`` available on a CUDA build (not a ROCm/HIP one);
    - ``hip``: ``torch.cuda`` available on a ROCm/HIP build (``torch.version.hip`` set), whose
      devices torch calls ``cuda``;
    - ``npu``: ``torch_npu`` importable and ``torch.npu.is_available()``;
    - ``xpu``: ``torch.xpu.is_available()``; ``mps``: ``torch.backends.mps.is_available()``.

    An unknown platform name is an error, not a silent CPU run.
    """
    if platform not in PLATFORMS:
        raise ValueError(f"unknown platform {platform!r}; expected one of {PLATFORMS}")
    import torch

    if platform in ("cuda", "hip"):
        is_hip = bool(getattr(torch.version, "hip", None))
        if torch.cuda.is_available() and is_hip == (platform == "hip"):
            return "cuda"
    elif platform == "npu":
        if _npu_available(torch):
            return "npu"
    elif platform == "xpu":
        xpu = getattr(torch, "xpu", None)
        if xpu is not None and xpu.is_available():
            return "xpu"
    elif platform == "mps" and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def _npu_available(torch: object) -> bool:
    # Ascend support lives in the torch_npu plugin, which registers ``torch.npu`` on import.
    if "torch_npu" not in sys.modules:
        try:
            importlib.import_module("torch_npu")
        except ImportError:
            return False
    npu = getattr(torch, "npu", None)
    return npu is not None and bool(npu.is_available())
