"""Peak signal-to-noise ratio per frame, as scikit-image's ``peak_signal_noise_ratio``.

``PSNR = 10 * log10(data_range**2 / MSE)`` with the MSE over every pixel and channel of the
frame. Identical frames give ``math.inf`` (scikit-image returns ``inf`` with a warning).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from harness.metrics._base import Metric, Reduce, as_frames
from harness.metrics._diff import per_frame_diff

__all__ = ["PSNR", "psnr"]


def psnr(pred: Any, target: Any, *, data_range: float = 255.0) -> np.ndarray:
    """PSNR in dB of each frame (float64 ``[T]``); ``inf`` where a frame is identical.

    >>> import numpy as np
    >>> a = np.zeros((4, 4, 3), np.uint8)
    >>> psnr(a, a)[0]
    np.float64(inf)
    """
    p, t = as_frames(pred, target)
    mse = per_frame_diff(p, t, "sum_sq") / float(np.prod(p.shape[1:]))
    out = np.empty_like(mse)
    for i, m in enumerate(mse):
        if np.isnan(m):
            out[i] = math.nan
        elif m == 0.0:
            out[i] = math.inf
        else:
            out[i] = 10.0 * math.log10(data_range**2 / m)
    return out


class PSNR(Metric):
    """PSNR per frame in dB (higher is better); ``value`` is the worst (lowest) frame."""

    name: ClassVar[str] = "psnr"
    unit: ClassVar[str] = "dB"
    higher_is_better: ClassVar[bool] = True

    def __init__(self, *, data_range: float = 255.0, reduce: Reduce = "worst") -> None:
        super().__init__(reduce=reduce)
        self.data_range = float(data_range)

    @property
    def settings(self) -> dict[str, Any]:
        """Data range, reduction and how identical frames are reported."""
        return {"data_range": self.data_range, "identical": "inf", "reduce": self.reduce}

    def _measure(self, pred: Any, target: Any) -> list[float]:
        return [float(v) for v in psnr(pred, target, data_range=self.data_range)]
