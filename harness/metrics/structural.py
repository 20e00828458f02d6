"""Structural similarity (SSIM), the Gaussian-window variant of Wang et al. (2004).

The settings reproduce scikit-image's
``structural_similarity(x, y, gaussian_weights=True, sigma=1.5, use_sample_covariance=False,
data_range=255, channel_axis=-1)``: an 11x11 Gaussian window (sigma 1.5, truncated at 3.5
sigma), K1 = 0.01, K2 = 0.03, the SSIM map averaged over the pixels at least half a window
from the border, then over channels. Per frame it agrees with scikit-image to ~1e-8.

Why it is fast: scikit-image filters five whole float64 images per channel with edge
reflection and then crops the border away. Only the cropped pixels count, so we filter the
*valid* region directly, in float32, and only four maps: ``x``, ``y``, ``x*x + y*y`` and
``x*y`` (SSIM needs ``var(x) + var(y)``, never each alone). The four maps of a frame (or of a
batch of small frames) go through one depthwise convolution per direction, channels last, which
oneDNN vectorises over the colour channels; a per-pixel Python-free shift-and-add did ~3x the
memory traffic. The SSIM arithmetic then runs on contiguous row chunks of the filtered maps,
small enough to stay in cache. Each frame and channel is centred on its own mean first (a
whole number for integer data, so the maps stay exact), which keeps float32 cancellation in
``E[x^2] - E[x]^2`` small: a flat frame has exactly zero variance, as in float64. A
frame equal to its reference element for element is 1.0 without filtering: with ``x == y``
every term of the SSIM quotient has a numerator equal to its denominator, bit for bit in this
arithmetic too (``x*x + y*y`` is ``2*x*x``, and every later term of the denominator is twice
the matching numerator term before the same constant is added).
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

#: Elements (pixels x channels) per convolution call: a 768x512 RGB frame goes in three bands
#: of rows, each with its window's halo (whole-frame calls measured ~1.5x slower: their
#: 20 MB of maps fall out of cache); many small frames share one call (per-call cost, not
#: arithmetic, is what a 32x32 frame costs).
_BAND_ELEMS = 1 << 19
#: Elements per map in one chunk of the SSIM arithmetic, so its temporaries stay in L2.
_CHUNK_ELEMS = 1 << 16


def _gaussian_taps(sigma: float, truncate: float) -> list[float]:
    # Same radius and normalisation as scipy.ndimage.gaussian_filter, which scikit-image uses.
    radius = int(truncate * sigma + 0.5)
    x = np.arange(-radius, radius + 1, dtype=np.float64)
    g = np.exp(-0.5 * (x / sigma) ** 2)
    return [float(v) for v in g / g.sum()]


def _windows(taps: list[float], channels: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The vertical and horizontal depthwise conv weights of the separable window."""
    import torch

    k = torch.tensor(taps, dtype=torch.float32)
    vertical = k.view(1, 1, -1, 1).expand(channels, 1, len(taps), 1).contiguous()
    horizontal = k.view(1, 1, 1, -1).expand(channels, 1, 1, len(taps)).contiguous()
    return vertical, horizontal


def _centres(x: np.ndarray) -> np.ndarray:
    """Per frame and channel of ``[n, h, w, c]``, about the mean (from every 4th row and
    column), as float32 ``[n, 1, 1, c]``; a whole number for integer data, so centred integer
    pixels, their squares and products stay exact in float32."""
    mean = x[:, ::4, ::4].mean(axis=(1, 2), keepdims=True, dtype=np.float64)
    if x.dtype.kind in "ui":
        mean = np.round(mean)
    return mean.astype(np.float32)


def _maps(x: np.ndarray, y: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``[4, n, h, w, c]`` float32 maps: ``x``, ``y``, ``x*x + y*y`` and ``x*y`` after taking
    each frame's centre off, and the centres of ``x`` and ``y`` (``[n, 1, 1, c]``)."""
    import torch

    maps = torch.empty((4, *x.shape), dtype=torch.float32)
    mx, my, sq, xy = maps.unbind(0)
    # numpy converts and centres in one pass (float64 input is centred before rounding). A
    # frame holding NaN or inf comes out NaN, as it should: no warning for what is intended.
    with np.errstate(invalid="ignore", over="ignore"):
        cx, cy = _centres(x), _centres(y)
        n, h, w, c = x.shape
        for src, centre, dst in ((x, cx, mx), (y, cy, my)):
            # A whole row of centres: broadcasting over rows keeps numpy's inner loop w*c long
            # (over channels it was 3 long and ~10x slower).
            row = np.broadcast_to(centre, (n, 1, w, c)).reshape(n, 1, w * c)
            np.subtract(
                src.reshape(n, h, w * c),
                row,
                out=dst.numpy().reshape(n, h, w * c),
                casting="unsafe",
            )
    torch.mul(mx, my, out=xy)
    torch.mul(mx, mx, out=sq)
    sq.add_(my * my)  # not addcmul: a fused multiply-add would break x*x + x*x == 2*x*x
    return maps, torch.from_numpy(cx), torch.from_numpy(cy)


def _filter_valid(maps: torch.Tensor, windows: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Correlate ``[m, h, w, c]`` maps with the window, keeping only fully covered pixels:
    ``[m, h - 2r, w - 2r, c]``, contiguous."""
    import torch.nn.functional as F

    c = maps.shape[-1]
    nchw = maps.permute(0, 3, 1, 2)  # channels-last memory: oneDNN vectorises over channels
    out = F.conv2d(F.conv2d(nchw, windows[0], groups=c), windows[1], groups=c)
    return out.permute(0, 2, 3, 1).contiguous()  # a view when oneDNN kept channels last


def _ssim_map(
    f: tuple[torch.Tensor, ...], cx: torch.Tensor, cy: torch.Tensor, c1: float, c2: float
) -> torch.Tensor:
    """The SSIM map from the filtered centred maps ``f`` (mx, my, sq, xy) and the centres."""
    import torch

    mx, my, sq, xy = f
    a = mx * my
    q = mx * mx
    q.add_(my * my)
    n2 = torch.sub(xy, a).mul_(2).add_(c2)  # 2 cov(x, y) + C2
    d2 = torch.sub(sq, q).add_(c2)  # var(x) + var(y) + C2
    # Means back on the data's scale: (mx+cx)(my+cy) = a + cy mx + cx my + cx cy, likewise
    # the squares; with x == y every denominator term is twice its numerator term.
    k1 = (2 * cx.double() * cy + c1).float()
    k2 = (cx.double() * cx + cy.double() * cy + c1).float()
    n1 = a.addcmul_(mx, cy).addcmul_(my, cx).mul_(2).add_(k1)  # 2 mu_x mu_y + C1
    d1 = q.addcmul_(mx, 2 * cx).addcmul_(my, 2 * cy).add_(k2)  # mu_x^2 + mu_y^2 + C1
    return n1.mul_(n2).div_(d1.mul_(d2))


def _ssim_sums(
    p: np.ndarray,
    t: np.ndarray,
    windows: tuple[torch.Tensor, torch.Tensor],
    c1: float,
    c2: float,
) -> torch.Tensor:
    """Sum of the SSIM map of each frame and channel of ``[n, h, w, c]`` frames, float64
    ``[n, c]``."""
    import torch

    n = p.shape[0]
    maps, cx, cy = _maps(p, t)
    f = _filter_valid(maps.flatten(0, 1), windows)
    f = f.view(4, n, *f.shape[1:])
    ho, wo, c = f.shape[2:]
    rows = max(1, _CHUNK_ELEMS // (n * wo * c))
    total = torch.zeros((n, c), dtype=torch.float64)
    for top in range(0, ho, rows):
        chunk = f[:, :, top : top + rows].unbind(0)
        total += _ssim_map(chunk, cx, cy, c1, c2).sum(dim=(1, 2)).double()
    return total


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
    r = win // 2
    windows = _windows(taps, c)

    # Work items (first frame, end frame, first row, end row): many small frames to an item,
    # a large frame in bands of rows that overlap by the window's halo.
    frame = h * w * c
    items: list[tuple[int, int, int, int]]
    if frame <= _BAND_ELEMS:
        per = _BAND_ELEMS // frame
        items = [(lo, min(lo + per, n), 0, h) for lo in range(0, n, per)]
    else:
        band = max(1, _BAND_ELEMS // (w * c) - 2 * r)
        items = [
            (i, i + 1, top, min(top + band, h - 2 * r) + 2 * r)
            for i in range(n)
            for top in range(0, h - 2 * r, band)
        ]

    def one_item(item: tuple[int, int, int, int]) -> torch.Tensor:
        lo, hi, top, bottom = item
        with torch.inference_mode():
            return _ssim_sums(p[lo:hi, top:bottom], t[lo:hi, top:bottom], windows, c1, c2)

    totals = torch.zeros((n, c), dtype=torch.float64)
    with _torch_single_threaded() as allowed:
        n_workers = max(1, min(len(items), workers if workers is not None else allowed))
        if n_workers == 1:
            sums = [one_item(item) for item in items]
        else:
            with ThreadPoolExecutor(n_workers, thread_name_prefix="harness-ssim") as pool:
                sums = list(pool.map(one_item, items))
    for (lo, hi, _top, _bottom), s in zip(items, sums, strict=True):
        totals[lo:hi] += s  # bands of one frame add up in a fixed order: workers never matter
    valid = (h - 2 * r) * (w - 2 * r)
    return (totals / valid).mean(dim=1).numpy()


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
