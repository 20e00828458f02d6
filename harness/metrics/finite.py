"""Finiteness: how many values of an array are NaN or +-Inf.

A non-finite output is a failure of its own kind (a ROCm job producing NaN audio), reported as a
count rather than folded into a similarity score.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

__all__ = ["count_nonfinite"]


def count_nonfinite(array: Any) -> int:
    """Number of NaN and +-Inf values in a numpy array, a torch tensor (any device or dtype,
    counted where it lives) or anything ``numpy.asarray`` accepts. Integer and bool data count 0.

    >>> import numpy as np
    >>> count_nonfinite(np.array([1.0, np.nan, np.inf, -np.inf]))
    3
    """
    torch = sys.modules.get("torch")
    # Only look for torch if the caller already imported it: a tensor implies it is loaded.
    if torch is not None and isinstance(array, torch.Tensor):
        if not (array.is_floating_point() or array.is_complex()):
            return 0
        return int((~torch.isfinite(array)).sum().item())
    arr = np.asarray(array)
    if arr.dtype.kind not in "fc":
        return 0
    return int(arr.size - np.count_nonzero(np.isfinite(arr)))
