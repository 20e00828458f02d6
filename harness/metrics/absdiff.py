"""Mean and maximum absolute pixel difference per frame, on the inputs' own scale (0..255
for uint8 video).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from harness.metrics._base import Metric, Reduce, as_frames
from harness.metrics._diff import per_frame_diff

__all__ = ["MAE", "MaxAbs", "mae", "max_abs"]


def mae(pred: Any, target: Any) -> np.ndarray:
    """Mean absolute difference of each frame over pixels and channels (float64 ``[T]``).

    >>> import numpy as np
    >>> float(mae(np.full((2, 2), 3, np.uint8), np.zeros((2, 2), np.uint8))[0])
    3.0
    """
    p, t = as_frames(pred, target)
    return per_frame_diff(p, t, "sum_abs") / float(np.prod(p.shape[1:]))


def max_abs(pred: Any, target: Any) -> np.ndarray:
    """Largest absolute difference of each frame (float64 ``[T]``)."""
    p, t = as_frames(pred, target)
    return per_frame_diff(p, t, "max_abs")


class MAE(Metric):
    """Mean absolute difference per frame (lower is better); ``value`` is the worst frame."""

    name: ClassVar[str] = "mae"
    unit: ClassVar[str] = "levels (0-255)"
    higher_is_better: ClassVar[bool] = False

    def __init__(self, *, reduce: Reduce = "worst") -> None:
        super().__init__(reduce=reduce)

    @property
    def settings(self) -> dict[str, Any]:
        """Scale and reduction."""
        return {"scale": "input (0-255 for uint8)", "reduce": self.reduce}

    def _measure(self, pred: Any, target: Any) -> list[float]:
        return [float(v) for v in mae(pred, target)]


class MaxAbs(Metric):
    """Maximum absolute difference per frame (lower is better); ``value`` is the worst frame."""

    name: ClassVar[str] = "max_abs"
    unit: ClassVar[str] = "levels (0-255)"
    higher_is_better: ClassVar[bool] = False

    def __init__(self, *, reduce: Reduce = "worst") -> None:
        super().__init__(reduce=reduce)

    @property
    def settings(self) -> dict[str, Any]:
        """Scale and reduction."""
        return {"scale": "input (0-255 for uint8)", "reduce": self.reduce}

    def _measure(self, pred: Any, target: Any) -> list[float]:
        return [float(v) for v in max_abs(pred, target)]
