"""Pixel-difference metrics per frame: PSNR, mean absolute difference and max absolute
difference, on the inputs' own scale (0..255 for uint8 video).

PSNR is scikit-image's ``peak_signal_noise_ratio``: ``10 log10(data_range**2 / MSE)`` with the
MSE over every pixel and channel of the frame; identical frames give ``math.inf``, a frame
with an infinite difference ``-math.inf`` and one with NaN ``nan``.

Differences are taken in float64 in cache-sized chunks (64 Ki elements, 512 KiB) into one
reused buffer: on uint8 video this is memory-bound, and staying in L2 was ~5x faster than
whole-frame temporaries. For 8/16-bit integer inputs every square and every sum is an integer
below 2**53, so the results are exact. Frames of 8-bit video (both sides uint8, or both int8)
take a faster exact path: int16 differences and float32 rows of 256 summed by BLAS (see
:func:`_byte_frame_sum`). Pure numpy, single-threaded: no OpenMP barriers to stall on a busy
CI runner.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, Literal

import numpy as np

from harness.metrics._base import Metric, Reduce, as_frames, identical_frames

__all__ = ["MAE", "PSNR", "MaxAbs", "mae", "max_abs", "psnr"]

Reduction = Literal["sum_sq", "sum_abs", "max_abs"]

_CHUNK = 1 << 16
#: Values per exact float32 row sum of 8-bit differences (see :func:`_byte_frame_sum`).
_ROW = 256
_BYTES = (np.dtype(np.uint8), np.dtype(np.int8))


def _per_frame_diff(p: np.ndarray, t: np.ndarray, how: Reduction) -> np.ndarray:
    """``how`` of ``|p - t|`` for each frame of two ``[T, ...]`` arrays, as float64 ``[T]``.

    A frame equal to its counterpart is 0 without a pass; small frames share a chunk (several
    frames per subtraction: a 32x32 frame is too small to pay for its own numpy calls).
    """
    n = p.shape[0]
    out = np.zeros(n, dtype=np.float64)  # identical frames
    differ = np.flatnonzero(~identical_frames(p, t))
    if not differ.size:
        return out
    size = int(np.prod(p.shape[1:]))
    if how != "max_abs" and p.dtype == t.dtype and p.dtype in _BYTES and size > _CHUNK:
        for i in differ:
            out[i] = _byte_frame_sum(p[i].reshape(-1), t[i].reshape(-1), how)
        return out
    buf = np.empty(_CHUNK, dtype=np.float64)
    if size <= _CHUNK:
        a = p.reshape(n, size)
        b = t.reshape(n, size)
        per = _CHUNK // max(size, 1)
        for lo in range(0, differ.size, per):
            rows = differ[lo : lo + per]
            d = buf[: rows.size * size].reshape(rows.size, size)
            np.subtract(a[rows], b[rows], out=d, dtype=np.float64)
            out[rows] = _reduce_rows(d, how)
        return out
    for i in differ:
        a = p[i].reshape(-1)
        b = t[i].reshape(-1)
        acc = 0.0
        for start in range(0, a.size, _CHUNK):
            d = buf[: min(_CHUNK, a.size - start)]
            np.subtract(
                a[start : start + _CHUNK], b[start : start + _CHUNK], out=d, dtype=np.float64
            )
            m = float(_reduce_rows(d[None], how)[0])
            if how != "max_abs":
                acc += m
            else:
                # NaN must win: max() keeps it, fmax would drop it.
                acc = m if (np.isnan(m) or m > acc) else acc
                if np.isnan(acc):
                    break
        out[i] = acc
    return out


def _byte_frame_sum(a: np.ndarray, b: np.ndarray, how: Reduction) -> float:
    """Sum of ``(a - b)**2`` or ``|a - b|`` over two flat 8-bit integer frames, exactly.

    Differences of 8-bit integers fit int16, their squares (<= 65,025) float32, and a row of
    256 of them sums to at most 16,646,400 < 2**24: every partial sum of a row is an integer
    float32 holds exactly, in whatever order BLAS adds it, and the row sums add up in float64
    (exact below 2**53). ~2x faster than float64 differences.
    """
    diff = np.empty(_CHUNK, dtype=np.int16)
    vals = np.zeros(_CHUNK, dtype=np.float32)  # a short last chunk's tail row stays 0
    ones = np.ones(_ROW, dtype=np.float32)
    acc = 0.0
    for start in range(0, a.size, _CHUNK):
        n = min(_CHUNK, a.size - start)
        d = diff[:n]
        np.subtract(a[start : start + n], b[start : start + n], out=d, dtype=np.int16)
        v = vals[: -(-n // _ROW) * _ROW]
        v[:n] = d
        v[n:] = 0.0
        if how == "sum_sq":
            np.multiply(v, v, out=v)
        else:
            np.abs(v, out=v)
        acc += float((v.reshape(-1, _ROW) @ ones).sum(dtype=np.float64))
    return acc


def _reduce_rows(d: np.ndarray, how: Reduction) -> np.ndarray:
    """``how`` of each row of the differences ``d`` (``[rows, n]``, changed in place)."""
    if how == "sum_sq":
        np.multiply(d, d, out=d)
        return d.sum(axis=1)
    np.abs(d, out=d)
    return d.sum(axis=1) if how == "sum_abs" else d.max(axis=1)


def psnr(pred: Any, target: Any, *, data_range: float = 255.0) -> np.ndarray:
    """PSNR in dB of each frame (float64 ``[T]``); ``inf`` where a frame is identical.

    >>> import numpy as np
    >>> a = np.zeros((4, 4, 3), np.uint8)
    >>> psnr(a, a)[0]
    np.float64(inf)
    """
    p, t = as_frames(pred, target)
    mse = _per_frame_diff(p, t, "sum_sq") / float(np.prod(p.shape[1:]))
    out = np.empty_like(mse)
    for i, m in enumerate(mse):
        if np.isnan(m):
            out[i] = math.nan
        elif m == 0.0:
            out[i] = math.inf
        elif math.isinf(m):  # an infinite pixel: log10(0), as numpy and scikit-image read it
            out[i] = -math.inf
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


def mae(pred: Any, target: Any) -> np.ndarray:
    """Mean absolute difference of each frame over pixels and channels (float64 ``[T]``).

    >>> import numpy as np
    >>> float(mae(np.full((2, 2), 3, np.uint8), np.zeros((2, 2), np.uint8))[0])
    3.0
    """
    p, t = as_frames(pred, target)
    return _per_frame_diff(p, t, "sum_abs") / float(np.prod(p.shape[1:]))


def max_abs(pred: Any, target: Any) -> np.ndarray:
    """Largest absolute difference of each frame (float64 ``[T]``)."""
    p, t = as_frames(pred, target)
    return _per_frame_diff(p, t, "max_abs")


class _AbsDiff(Metric):
    """Shared shape of the absolute-difference metrics (lower is better, worst frame)."""

    unit: ClassVar[str] = "levels (0-255)"
    higher_is_better: ClassVar[bool] = False

    def __init__(self, *, reduce: Reduce = "worst") -> None:
        super().__init__(reduce=reduce)

    @property
    def settings(self) -> dict[str, Any]:
        """Scale and reduction."""
        return {"scale": "input (0-255 for uint8)", "reduce": self.reduce}

    @staticmethod
    def _per_frame(pred: Any, target: Any) -> np.ndarray:
        raise NotImplementedError

    def _measure(self, pred: Any, target: Any) -> list[float]:
        return [float(v) for v in self._per_frame(pred, target)]


class MAE(_AbsDiff):
    """Mean absolute difference per frame (lower is better); ``value`` is the worst frame."""

    name: ClassVar[str] = "mae"
    _per_frame = staticmethod(mae)


class MaxAbs(_AbsDiff):
    """Maximum absolute difference per frame (lower is better); ``value`` is the worst frame."""

    name: ClassVar[str] = "max_abs"
    _per_frame = staticmethod(max_abs)
