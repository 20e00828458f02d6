"""The CPU's feature flags as Linux lists them in ``/proc/cpuinfo`` (``flags`` on x86,
``Features`` on Arm): the one reader behind the environment's ``cpu_flags``
(:mod:`harness.worker.machineinfo`) and the MP4 writer's choice of libx264 code
(:func:`harness.media.mp4_video_options`).

Example::

    "avx512f" in (flags() or ())
"""

from __future__ import annotations

import re

__all__ = ["flags"]

_LINE = re.compile(r"^(?:flags|Features)\s*:\s*(.*)$", re.M)


def flags(cpuinfo: str = "/proc/cpuinfo") -> frozenset[str] | None:
    """The flags of the first CPU in ``cpuinfo``; None where the file cannot be read or names
    none (not Linux)."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            text = f.read(1 << 16)
    except OSError:
        return None
    m = _LINE.search(text)
    return None if m is None else frozenset(m.group(1).split())
