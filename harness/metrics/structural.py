"""Structural similarity (SSIM), the Gaussian-window variant of Wang et al. (2004).

The settings reproduce scikit-image's
``structural_similarity(x, y, gaussian_weights=True, sigma=1.5, use_sample_covariance=False,
data_range=255, channel_axis=-1)``: an 11x11 Gaussian window (sigma 1.5, truncated at 3.5
sigma), K1 = 0.01, K2 = 0.03, the SSIM map averaged over the pixels at least half a window
from the border, then over channels. Per frame it agrees with scikit-image to ~1e-8.

Why it is fast: scikit-image filters five whole float64 images per channel with edge reflection
and then crops the border away. Only the cropped pixels count, so we filter the *valid* region
directly, in float32, and only four maps: ``x``, ``y``, ``x*x + y*y`` and ``x*y`` (SSIM needs
``var(x) + var(y)``, never each alone). Each map holds every 8 rows of a frame as one row
block, the 8 rows interleaved as the innermost axis (``[blocks, w, c, 8]``): then the vertical
pass is one dense 8 -> 8 channel convolution over row blocks (a polyphase filter, 3 blocks
tall) and the horizontal pass a depthwise one over the 8 phases (dilated by the colour count),
both filling AVX2's 8 float32 lanes in oneDNN; with the 3 colours as the only channels (the
previous layout) most lanes idled and the passes took ~3x as long. The SSIM arithmetic then
runs on contiguous chunks of row blocks, small enough to stay in cache, with every per-channel
constant laid out as a whole row of the maps (a 3-long broadcast made each op ~5x slower). Each
frame and channel is centred on its own mean first (a whole number for integer data, so the
maps stay exact), which keeps float32 cancellation in ``E[x^2] - E[x]^2`` small: a flat frame
has exactly zero variance, as in float64. A frame equal to its reference element for element is
1.0 without filtering: with ``x == y`` every term of the SSIM quotient has a numerator equal to
its denominator, bit for bit in this arithmetic too (``x*x + y*y`` is ``2*x*x``, and every
later term of the denominator is twice the matching numerator term before the same constant is
added).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from harness.metrics._base import Metric, Reduce, as_frames, identical_frames

if TYPE_CHECKING:
    import torch

__all__ = ["SSIM", "ssim"]

#: Rows of a frame interleaved into one row block (see the module docstring): the vertical
#: pass is a dense 8 -> 8 channel convolution over blocks, the horizontal one a depthwise
#: convolution over the 8 phases; both fill AVX2's 8 float32 lanes.
_PHASES = 8
#: Input elements (pixels x channels) of one map per convolution call: a 768x512 RGB frame goes
#: in bands of row blocks with the window's halo, so that a band's maps stay in cache and the
#: convolutions' outputs are small enough for malloc to recycle (at 2**20 they came from fresh
#: pages: ~3,000 page faults a frame); many small frames share one call (per-call cost, not
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


def _weights(taps: list[float]) -> tuple[torch.Tensor, torch.Tensor]:
    """The vertical (polyphase, ``[P, P, kb, 1]``) and horizontal (depthwise, ``[P, 1, 1, win]``)
    conv weights of the separable window."""
    import torch

    p, win = _PHASES, len(taps)
    kb = _reach(win)
    # Output row P*b + j of a block takes input rows P*b + j .. P*b + j + win - 1, i.e. phase
    # i of block b + t with weight taps[P*t + i - j] where that index is inside the window.
    poly = np.zeros((p, p, kb), dtype=np.float64)
    for j in range(p):
        for i in range(p):
            for t in range(kb):
                d = p * t + i - j
                if 0 <= d < win:
                    poly[j, i, t] = taps[d]
    vertical = torch.tensor(poly, dtype=torch.float32).view(p, p, kb, 1)
    k = torch.tensor(taps, dtype=torch.float32)
    horizontal = k.view(1, 1, 1, -1).expand(p, 1, 1, win).contiguous()
    return vertical, horizontal


def _reach(win: int) -> int:
    """Input row blocks one output row block reads (its own and the ones below)."""
    return 1 + (_PHASES + win - 2) // _PHASES


def _centres(x: np.ndarray) -> np.ndarray:
    """Per frame and channel of ``[n, h, w, c]``, about the mean (from every 8th row and
    column: any centre near the data works), as float32 ``[n, c]``; a whole number for integer
    data, so centred integer pixels, their squares and products stay exact in float32."""
    with np.errstate(invalid="ignore", over="ignore"):
        mean = x[:, ::8, ::8].mean(axis=(1, 2), dtype=np.float64)
    if x.dtype.kind in "ui":
        mean = np.round(mean)
    return mean.astype(np.float32)


def _maps(
    x: np.ndarray,
    y: np.ndarray,
    centres: tuple[np.ndarray, np.ndarray],
    blocks: int,
    workspace: torch.Tensor,
) -> torch.Tensor:
    """``[4, n, blocks, w, c, P]`` float32 maps ``x``, ``y``, ``x*x + y*y`` and ``x*y`` in
    ``workspace``, each frame less its per-channel centre (``[n, c]``), with row ``P*b + i``
    at block ``b``, phase ``i`` (rows past the input's end are 0)."""
    import torch

    n, h, w, c = x.shape
    p = _PHASES
    # Reused between bands: a fresh 16 MB tensor paid ~2 ms of page faults.
    maps = workspace[: 4 * n * blocks * w * c * p].view(4, n, blocks, w, c, p)
    full, rest = divmod(min(h, blocks * p), p)
    maps[:2, :, full + (rest > 0) :] = 0  # rows past the input's end
    if rest:
        maps[:2, :, full, :, :, rest:] = 0
    # numpy converts and centres in one pass (float64 input is centred before rounding). A
    # frame holding NaN or inf comes out NaN, as it should: no warning for what is intended.
    with np.errstate(invalid="ignore", over="ignore"):
        for src, centre, dst in ((x, centres[0], maps[0]), (y, centres[1], maps[1])):
            # [n, blocks, P, w, c] view of the phase-last maps: the inner w*c loop is one
            # long strided loop for numpy (over channels it was 3 long and ~10x slower).
            out = dst.numpy().transpose(0, 1, 4, 2, 3)
            # A whole row of centres: broadcasting a [c] vector over w is a 3-long loop.
            row = np.ascontiguousarray(
                np.broadcast_to(centre[:, None, None, None], (n, 1, 1, w, c))
            )
            if full:
                np.subtract(
                    src[:, : full * p].reshape(n, full, p, w, c),
                    row,
                    out=out[:, :full],
                    casting="unsafe",
                )
            if rest:
                np.subtract(
                    src[:, full * p : full * p + rest],
                    row[:, 0],
                    out=out[:, full, :rest],
                    casting="unsafe",
                )
    mx, my, sq, xy = maps.unbind(0)
    torch.mul(my, my, out=xy)
    torch.mul(mx, mx, out=sq)
    sq.add_(xy)  # not addcmul: a fused multiply-add would break x*x + x*x == 2*x*x
    torch.mul(mx, my, out=xy)
    return maps


def _filter_valid(
    maps: torch.Tensor, weights: tuple[torch.Tensor, torch.Tensor], c: int
) -> torch.Tensor:
    """Correlate ``[m, blocks, w, c, P]`` maps with the window, keeping only fully covered
    pixels: ``[m, blocks - kb + 1, w - win + 1, c, P]``, contiguous."""
    import torch.nn.functional as F

    m, blocks, w = maps.shape[:3]
    # Channels last: the channels are the 8 phases and each (column, colour) a position.
    # Vertically one dense 8 -> 8 convolution (grouped per colour it was ~3x slower).
    rows = maps.view(m, blocks, w * c, _PHASES).permute(0, 3, 1, 2)
    v = F.conv2d(rows, weights[0])
    # Horizontally the same layout: depthwise over the phases, a colour's next pixel c
    # positions on (dilation); it was ~15 % slower as (colour, phase) channels.
    out = F.conv2d(v, weights[1], groups=_PHASES, dilation=(1, c))
    out = out.permute(0, 2, 3, 1).contiguous()  # a view when oneDNN kept channels last
    return out.view(m, out.shape[1], -1, c, _PHASES)


def _ssim_map(
    f: tuple[torch.Tensor, ...], consts: tuple[torch.Tensor, ...], c2: float
) -> torch.Tensor:
    """A quarter of the SSIM map from the filtered centred maps ``f`` (mx, my, sq, xy) and the
    constants of :func:`_constants`. Both numerator factors are halved (two ops fewer than
    doubling them); the caller multiplies the sum by 4, exactly."""
    import torch

    mx, my, sq, xy = f
    cx, cy, cx2, cy2, k1h, k2 = consts
    a = mx * my
    q = mx * mx
    q.add_(my * my)
    n2h = torch.sub(xy, a).add_(c2 / 2)  # cov(x, y) + C2 / 2
    d2 = torch.sub(sq, q).add_(c2)  # var(x) + var(y) + C2
    # Means back on the data's scale: (mx+cx)(my+cy) = a + cy mx + cx my + cx cy, likewise
    # the squares. With x == y every denominator term is exactly twice its numerator term, so
    # an identical frame gives 1/4 everywhere (1.0 after the caller's factor), bit for bit.
    n1h = a.addcmul_(mx, cy).addcmul_(my, cx).add_(k1h)  # mu_x mu_y + C1 / 2
    d1 = q.addcmul_(mx, cx2).addcmul_(my, cy2).add_(k2)  # mu_x^2 + mu_y^2 + C1
    return n1h.mul_(n2h).div_(d1.mul_(d2))


def _constants(
    cx: np.ndarray, cy: np.ndarray, c1: float, shape: tuple[int, ...]
) -> tuple[torch.Tensor, ...]:
    """cx, cy, 2 cx, 2 cy, cx cy + C1 / 2 and cx^2 + cy^2 + C1 from per-frame centres
    ``[n, c]``, each as a whole row ``shape`` (``[n, 1, wo, c, P]``) of the maps' layout."""
    import torch

    n, _, wo, c, p = shape
    x, y = cx.astype(np.float64), cy.astype(np.float64)
    values = (x, y, 2 * x, 2 * y, x * y + c1 / 2, x * x + y * y + c1)
    # One [c * P] row per frame, then that row wo times: copies with a 24-long inner loop
    # (broadcasting straight from [n, c] ran a 1-long one, ~10x slower).
    rows = (np.repeat(v.astype(np.float32), p, axis=1)[:, None, None] for v in values)
    return tuple(
        torch.from_numpy(np.broadcast_to(r, (n, 1, wo, c * p)).copy()).view(shape) for r in rows
    )


def _ssim_sums(
    p: np.ndarray,
    t: np.ndarray,
    centres: tuple[np.ndarray, np.ndarray],
    workspace: torch.Tensor,
    blocks: int,
    valid_rows: int,
    weights: tuple[torch.Tensor, torch.Tensor],
    c1: float,
    c2: float,
) -> torch.Tensor:
    """Sum of the SSIM map over the first ``valid_rows`` rows (``blocks`` output row blocks)
    of each frame and channel of ``[n, h, w, c]`` frames, float64 ``[n, c]``; ``centres``:
    each frame's centres (see :func:`_maps`)."""
    import torch

    n, c = p.shape[0], p.shape[3]
    kb = _reach(weights[1].shape[-1])
    maps = _maps(p, t, centres, blocks + kb - 1, workspace)
    f = _filter_valid(maps.flatten(0, 1), weights, c)
    f = f.view(4, n, *f.shape[1:])  # [4, n, blocks, wo, c, P]
    wo = f.shape[3]
    consts = _constants(*centres, c1, (n, 1, wo, c, _PHASES))
    per = max(1, _CHUNK_ELEMS // (n * wo * c * _PHASES))
    rows = torch.empty((n, blocks, c, _PHASES), dtype=torch.float64)
    for top in range(0, blocks, per):
        chunk = f[:, :, top : top + per].unbind(0)
        rows[:, top : top + per] = _ssim_map(chunk, consts, c2).sum(dim=2)
    # Rows past the frame's valid region (the last block's tail) read zero padding: drop them.
    rows = rows.permute(0, 2, 1, 3).reshape(n, c, blocks * _PHASES)[:, :, :valid_rows]
    return rows.sum(dim=2)


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
    weights = _weights(taps)
    ho = h - win + 1
    blocks = -(-ho // _PHASES)  # output row blocks of a frame
    halo = _reach(win) - 1

    # Work items (first frame, end frame, first block, end block): many small frames to an
    # item, a large frame in bands of row blocks that overlap by the window's halo.
    frame = (blocks + halo) * _PHASES * w * c
    items: list[tuple[int, int, int, int]]
    if frame <= _BAND_ELEMS:
        per = _BAND_ELEMS // frame
        items = [(lo, min(lo + per, n), 0, blocks) for lo in range(0, n, per)]
    else:
        band = max(1, _BAND_ELEMS // (_PHASES * w * c) - halo)
        items = [
            (i, i + 1, top, min(top + band, blocks))
            for i in range(n)
            for top in range(0, blocks, band)
        ]

    cx, cy = _centres(p), _centres(t)
    size = max(
        4 * (hi - lo) * (bottom - top + halo) * _PHASES * w * c for lo, hi, top, bottom in items
    )
    local = threading.local()  # one workspace per worker thread, reused for its items

    def one_item(item: tuple[int, int, int, int]) -> torch.Tensor:
        lo, hi, top, bottom = item
        first, end = top * _PHASES, (bottom + halo) * _PHASES
        valid = min(bottom * _PHASES, ho) - first
        with torch.inference_mode():
            if getattr(local, "workspace", None) is None:
                local.workspace = torch.empty(size, dtype=torch.float32)
            return _ssim_sums(
                p[lo:hi, first:end],
                t[lo:hi, first:end],
                (cx[lo:hi], cy[lo:hi]),
                local.workspace,
                bottom - top,
                valid,
                weights,
                c1,
                c2,
            )

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
    valid = ho * (w - win + 1)
    return (totals * 4 / valid).mean(dim=1).numpy()  # _ssim_map gives a quarter


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
