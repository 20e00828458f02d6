"""Helpers every scenario module shares. Imports nothing heavy at import time (torch is imported
inside the functions), so a cold-import scenario can import this package honestly."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tinyav._probe import probe


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
    """The torch device to run ``platform`` on here; CPU when that device is absent."""
    import torch

    if platform in ("cuda", "hip") and torch.cuda.is_available():
        return "cuda"
    if platform == "mps" and torch.backends.mps.is_available():
        return "mps"
    if platform == "xpu" and hasattr(torch, "xpu") and torch.xpu.is_available():
        return "xpu"
    return "cpu"
