"""Structural similarity (SSIM), the Gaussian-window variant of Wang et al. (2004).

The settings reproduce scikit-image's
``structural_similarity(x, y, gaussian_weights=True, sigma=1.5, use_sample_covariance=False,
data_range=255, channel_axis=-1)``: an 11x11 Gaussian window (sigma 1.5, truncated at 3.5
sigma), K1 = 0.01, K2 = 0.03, the SSIM map averaged over the pixels at least half a window
from the border, then over channels. Per frame it agrees with scikit-image to ~1e-9.

Why it is fast: scikit-image filters whole float64 images with edge reflection and then crops
the border away. Only the cropped pixels count, so we filter the *valid* region directly, in
float32, as shift-and-add passes over tiles of rows small enough to stay in cache, one frame
per thread. Inputs are centred on half the data range first, which keeps float32 cancellation
in ``E[x^2] - E[x]^2`` four times smaller than on raw 0..255 values. A frame equal to its
reference element for element is 1.0 without filtering: with ``x == y`` every term of the
SSIM quotient has a numerator equal to its denominator, bit for bit in this arithmetic too
(``2*m*m`` is ``m*m + m*m``, and ``s_xy - m*m`` is ``s_xx - m*m``).
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from harness.metrics._base import Metric, Reduce, as_frames, identical_frames

if TYPE_CHECKING:
    import torch

__all__ = ["SSIM", "ssim"]

#: Rows of output per tile. 32-64 keeps the five filtered maps of one tile in L2 on 768-wide
#: frames; whole-frame passes were ~3x slower (measured on 768x512 RGB).
_TILE_ROWS = 48
#: Pixels x channels per batch of frames: about one tile of a 768-wide RGB frame, so many
#: small frames (32x32: 36 of them) share each filter pass.
_BATCH_ELEMS = _TILE_ROWS * 768 * 3


def _gaussian_taps(sigma: float, truncate: float) -> list[float]:
    # Same radius and normalisation as scipy.ndimage.gaussian_filter, which scikit-image uses.
    radius = int(truncate * sigma + 0.5)
    x = np.arange(-radius, radius + 1, dtype=np.float64)
    g = np.exp(-0.5 * (x / sigma) ** 2)
    return [float(v) for v in g / g.sum()]


def _filter_valid(s: torch.Tensor, taps: list[float]) -> torch.Tensor:
    """Separable correlation over the last two dims, keeping only fully covered pixels."""
    k = len(taps)
    r = k // 2
    h, w = s.shape[-2], s.shape[-1]
    # Symmetric taps: add mirrored pairs first, halving the multiplies.
    out = s[..., r : h - r, :] * taps[r]
    for i in range(r):
        out.add_(
            s[..., i : i + h - 2 * r, :] + s[..., k - 1 - i : k - 1 - i + h - 2 * r, :],
            alpha=taps[i],
        )
    s = out
    out = s[..., r : w - r] * taps[r]
    for i in range(r):
        out.add_(
            s[..., i : i + w - 2 * r] + s[..., k - 1 - i : k - 1 - i + w - 2 * r], alpha=taps[i]
        )
    return out


def _ssim_map_sum(
    x: torch.Tensor, y: torch.Tensor, taps: list[float], c1: float, c2: float, centre: float
) -> torch.Tensor:
    """Sum of the SSIM map of centred ``x``, ``y`` (``[..., C, h, W]``) per frame and channel,
    in float64."""
    import torch

    stacked = torch.stack([x, y, x * x, y * y, x * y])
    mx, my, sxx, syy, sxy = _filter_valid(stacked, taps).unbind(0)
    vx = sxx - mx * mx
    vy = syy - my * my
    vxy = sxy - mx * my
    mx = mx + centre
    my = my + centre
    num = (2 * mx * my + c1) * (2 * vxy + c2)
    den = (mx * mx + my * my + c1) * (vx + vy + c2)
    return (num / den).sum(dim=(-2, -1), dtype=torch.float64)


@contextmanager
def _torch_single_threaded() -> Iterator[int]:
    """Run torch ops inline for the duration; yields the thread count to use instead.

    Why: every small tile op is an OpenMP parallel region ending in a barrier. On a busy runner
    (other jobs, the harness's own workers) a descheduled OpenMP thread stalls each barrier, and
    two-thread SSIM measured 5-10x slower than one thread. Parallelising over frames with
    Python threads (torch releases the GIL) uses as many cores as torch was allowed, without
    barriers. The previous setting is restored on exit.
    """
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield before
    finally:
        torch.set_num_threads(before)


def ssim(
    pred: Any,
    target: Any,
    *,
    data_range: float = 255.0,
    sigma: float = 1.5,
    truncate: float = 3.5,
    k1: float = 0.01,
    k2: float = 0.03,
    workers: int | None = None,
) -> np.ndarray:
    """SSIM of each frame of ``pred`` against ``target``, averaged over channels.

    ``pred``/``target``: ``[H, W]``, ``[H, W, C]`` or ``[T, H, W, C]`` (numpy, torch or
    ``VideoData``) on a 0..``data_range`` scale. Returns float64 ``[T]`` (``[1]`` for one frame).
    ``workers``: frames computed in parallel; default ``torch.get_num_threads()``, so the
    process's torch thread setting stays the one knob for how many cores metrics use.

    >>> import numpy as np
    >>> a = np.zeros((16, 16, 3), np.uint8)
    >>> float(ssim(a, a)[0])
    1.0
    """
    p, t = as_frames(pred, target)
    taps = _gaussian_taps(sigma, truncate)
    win = len(taps)
    _n, h, w, _c = p.shape
    if h < win or w < win:
        raise ValueError(f"frames are {h}x{w}, smaller than the {win}x{win} SSIM window")
    values = np.ones(p.shape[0], dtype=np.float64)  # identical frames (module docstring)
    differ = np.flatnonzero(~identical_frames(p, t))
    if differ.size == values.size:
        values[:] = _ssim_frames(p, t, taps, data_range, k1, k2, workers)
    elif differ.size:
        values[differ] = _ssim_frames(p[differ], t[differ], taps, data_range, k1, k2, workers)
    return values


def _ssim_frames(
    p: np.ndarray,
    t: np.ndarray,
    taps: list[float],
    data_range: float,
    k1: float,
    k2: float,
    workers: int | None,
) -> np.ndarray:
    """SSIM per frame of ``[T, H, W, C]`` frames, each filtered (see :func:`ssim`)."""
    import torch

    win = len(taps)
    n, h, w, c = p.shape
    c1 = (k1 * data_range) ** 2
    c2 = (k2 * data_range) ** 2
    centre = data_range / 2.0
    r = win // 2
    valid = (h - 2 * r) * (w - 2 * r)

    # Small frames go in batches (one set of filter passes for many frames: per-op overhead,
    # not arithmetic, is what a 32x32 frame costs); a large frame is one batch, in row tiles.
    per = max(1, _BATCH_ELEMS // (h * w * c))
    batches = [(lo, min(lo + per, n)) for lo in range(0, n, per)]

    def one_batch(bounds: tuple[int, int]) -> list[float]:
        lo, hi = bounds
        with torch.inference_mode():
            # float32 copies (numpy's cast): a read-only reference array is never shared.
            x = torch.from_numpy(np.asarray(p[lo:hi], dtype=np.float32)).permute(0, 3, 1, 2)
            y = torch.from_numpy(np.asarray(t[lo:hi], dtype=np.float32)).permute(0, 3, 1, 2)
            x, y = x - centre, y - centre
            total = torch.zeros((hi - lo, c), dtype=torch.float64)
            for top in range(0, h - 2 * r, _TILE_ROWS):
                bottom = min(top + _TILE_ROWS + 2 * r, h)
                total += _ssim_map_sum(
                    x[..., top:bottom, :], y[..., top:bottom, :], taps, c1, c2, centre
                )
            return [float(v) for v in (total / valid).mean(dim=1)]

    with _torch_single_threaded() as allowed:
        n_workers = max(1, min(len(batches), workers if workers is not None else allowed))
        if n_workers == 1:
            values = [v for b in batches for v in one_batch(b)]
        else:
            with ThreadPoolExecutor(n_workers, thread_name_prefix="harness-ssim") as pool:
                values = [v for vs in pool.map(one_batch, batches) for v in vs]
    return np.asarray(values, dtype=np.float64)


class SSIM(Metric):
    """SSIM per frame (higher is better, 1 = identical); ``value`` is the worst frame."""

    name: ClassVar[str] = "ssim"
    unit: ClassVar[str] = ""
    higher_is_better: ClassVar[bool] = True

    def __init__(
        self,
        *,
        data_range: float = 255.0,
        sigma: float = 1.5,
        k1: float = 0.01,
        k2: float = 0.03,
        reduce: Reduce = "worst",
    ) -> None:
        super().__init__(reduce=reduce)
        self.data_range = float(data_range)
        self.sigma = float(sigma)
        self.k1 = float(k1)
        self.k2 = float(k2)

    @property
    def settings(self) -> dict[str, Any]:
        """Every setting, including the derived window size."""
        return {
            "window": "gaussian",
            "window_size": len(_gaussian_taps(self.sigma, 3.5)),
            "sigma": self.sigma,
            "truncate": 3.5,
            "data_range": self.data_range,
            "k1": self.k1,
            "k2": self.k2,
            "use_sample_covariance": False,
            "border": "valid (window radius cropped)",
            "channels": "mean",
            "reduce": self.reduce,
        }

    def _measure(self, pred: Any, target: Any) -> list[float]:
        values = ssim(
            pred, target, data_range=self.data_range, sigma=self.sigma, k1=self.k1, k2=self.k2
        )
        return [float(v) for v in values]
