"""The metric contract: a result record, a small stateful class, and input normalisation.

Kept free of torch, transformers and scikit-image so that importing :mod:`harness.metrics`
stays cheap in the manager process.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np

Reduce = Literal["worst", "mean"]


@dataclass(frozen=True)
class MetricResult:
    """One metric's outcome, with every setting it was computed under.

    ``value`` is the aggregate a check applies its threshold to: by default the *worst* frame
    (lowest when ``higher_is_better``, else highest); ``settings["reduce"] == "mean"`` if the
    mean was asked for. A NaN anywhere makes ``value`` NaN, so it can never pass a threshold.
    Identical inputs give ``math.inf`` for PSNR and audio SNR; ``to_dict`` keeps it a float, so
    ``json.dumps`` writes ``Infinity`` (the report writer may choose the string ``"inf"``;
    ``from_dict`` accepts both).

    ``status`` is ``"not_run"`` (with ``value=None`` and ``skipped_reason``) when the metric
    could not be computed at all, e.g. CLIP without a configured model.
    """

    name: str
    value: float | None
    unit: str
    higher_is_better: bool
    per_frame: tuple[float, ...] | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    status: Literal["ok", "not_run"] = "ok"
    skipped_reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data; non-finite floats stay floats (see the class docstring)."""
        return {
            "name": self.name,
            "value": self.value,
            "unit": self.unit,
            "higher_is_better": self.higher_is_better,
            "per_frame": list(self.per_frame) if self.per_frame is not None else None,
            "settings": dict(self.settings),
            "status": self.status,
            "skipped_reason": self.skipped_reason,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MetricResult:
        """Inverse of :meth:`to_dict`; also accepts ``"inf"``/``"-inf"``/``"nan"`` strings."""
        per_frame = data.get("per_frame")
        status = data.get("status", "ok")
        if status not in ("ok", "not_run"):
            raise ValueError(f"MetricResult status is {status!r}, expected 'ok' or 'not_run'")
        return cls(
            name=str(data["name"]),
            value=_float_or_none(data.get("value")),
            unit=str(data.get("unit", "")),
            higher_is_better=bool(data["higher_is_better"]),
            per_frame=tuple(float(v) for v in per_frame) if per_frame is not None else None,
            settings=dict(data.get("settings") or {}),
            status=status,
            skipped_reason=data.get("skipped_reason"),
        )


def _float_or_none(v: Any) -> float | None:
    # float("inf") / float("Infinity") / float("nan") all parse; None stays None.
    return None if v is None else float(v)


def aggregate(values: np.ndarray, *, higher_is_better: bool, reduce: Reduce) -> float:
    """Worst (per direction) or mean of per-frame values; any NaN makes the result NaN."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.size == 0:
        raise ValueError("cannot aggregate a metric over zero frames")
    if np.isnan(arr).any():
        return math.nan
    if reduce == "mean":
        return float(arr.mean())
    if reduce == "worst":
        return float(arr.min() if higher_is_better else arr.max())
    raise ValueError(f"reduce is {reduce!r}, expected 'worst' or 'mean'")


class Metric:
    """Base of every metric class: accumulate with ``update``, read with ``compute``.

    Subclasses set the class attributes and implement :meth:`_measure` (usually by calling their
    functional twin). Each ``update`` adds one value per frame (image metrics) or per clip
    (audio metrics).

    Example::

        m = SSIM()
        m.update(video.frames, reference_frames)
        result = m.compute()   # result.value is the worst frame's SSIM
    """

    name: ClassVar[str]
    unit: ClassVar[str]
    higher_is_better: ClassVar[bool]
    #: whether ``per_frame`` is reported (image metrics) or left ``None`` (audio metrics).
    reports_per_frame: ClassVar[bool] = True

    def __init__(self, *, reduce: Reduce = "worst") -> None:
        if reduce not in ("worst", "mean"):
            raise ValueError(f"reduce is {reduce!r}, expected 'worst' or 'mean'")
        self.reduce: Reduce = reduce
        self._values: list[float] = []

    @property
    def settings(self) -> dict[str, Any]:
        """Every setting the value depends on, recorded in the result."""
        return {"reduce": self.reduce}

    def _measure(self, pred: Any, target: Any) -> list[float]:
        raise NotImplementedError

    def update(self, pred: Any, target: Any) -> None:
        """Compare ``pred`` with ``target`` and keep the per-frame (or per-clip) values."""
        self._values.extend(float(v) for v in self._measure(pred, target))

    def reset(self) -> None:
        """Forget every value seen so far."""
        self._values.clear()

    def compute(self) -> MetricResult:
        """Aggregate everything seen since construction or the last :meth:`reset`."""
        if not self._values:
            raise ValueError(f"{self.name}: compute() called before any update()")
        value = aggregate(
            np.asarray(self._values), higher_is_better=self.higher_is_better, reduce=self.reduce
        )
        return MetricResult(
            name=self.name,
            value=value,
            unit=self.unit,
            higher_is_better=self.higher_is_better,
            per_frame=tuple(self._values) if self.reports_per_frame else None,
            settings=self.settings,
        )


def as_numpy(x: Any, arg: str) -> np.ndarray:
    """A numpy view of a numpy array, a torch tensor (any device), or anything with ``.frames``
    / ``.pcm`` (``VideoData`` / ``AudioData``)."""
    for attr in ("frames", "pcm"):
        inner = getattr(x, attr, None)
        if isinstance(inner, np.ndarray):
            return inner
    if isinstance(x, np.ndarray):
        return x
    if type(x).__module__.startswith("torch"):
        t = x.detach().cpu()
        # numpy has no bfloat16/float8: widen those (exactly) before converting.
        if not t.dtype.is_complex and t.is_floating_point() and t.element_size() < 4:
            t = t.float()
        return np.asarray(t.numpy())
    try:
        return np.asarray(x)
    except Exception as exc:
        raise TypeError(
            f"{arg} is {type(x).__name__}, expected a numpy array, a torch tensor or VideoData"
        ) from exc


def identical_frames(p: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Which frames of two ``[T, ...]`` arrays of one shape are equal element for element
    (bool ``[T]``). NaN equals nothing, so a frame holding one is never identical.

    A metric reads an identical frame's value exactly (SSIM 1, MSE 0, ...) instead of
    computing it; a correct run on the runner class it was blessed on is usually bit-identical
    to its reference, so this is most frames of most attempts, and costs one comparison.
    """
    n = p.shape[0]
    if not n:
        return np.zeros(0, dtype=bool)
    if (
        p.dtype == t.dtype
        and p.dtype.kind in "ui"
        and p.flags.c_contiguous
        and t.flags.c_contiguous
        and p.nbytes % (8 * n) == 0
    ):
        # Integers are equal exactly when their bytes are: compare 8 bytes at a time (~3x
        # faster on uint8 video). Floats compare by value (NaN != NaN, 0.0 == -0.0).
        a, b = p.reshape(n, -1).view(np.uint64), t.reshape(n, -1).view(np.uint64)
        return np.asarray((a == b).all(axis=1), dtype=bool)
    return np.asarray((p == t).reshape(n, -1).all(axis=1), dtype=bool)


def as_frames(pred: Any, target: Any) -> tuple[np.ndarray, np.ndarray]:
    """Normalise a pair of images or videos to ``[T, H, W, C]`` numpy arrays of equal shape.

    Accepted shapes: ``[H, W]`` (one grey frame), ``[H, W, C]`` (one frame, channel last) and
    ``[T, H, W, C]`` (a video; a grey video is ``[T, H, W, 1]``).
    """
    out = []
    for arg, x in (("pred", pred), ("target", target)):
        a = as_numpy(x, arg)
        if a.ndim == 2:
            a = a[None, :, :, None]
        elif a.ndim == 3:
            a = a[None]
        elif a.ndim != 4:
            raise ValueError(
                f"{arg} has shape {a.shape}, expected [H, W], [H, W, C] or [T, H, W, C]"
            )
        if a.dtype.kind not in "uif":
            raise TypeError(f"{arg} has dtype {a.dtype}, expected an integer or float array")
        out.append(a)
    p, t = out
    if p.shape != t.shape:
        raise ValueError(f"pred has shape {p.shape} but target has shape {t.shape}")
    if p.shape[0] == 0:
        raise ValueError("pred and target hold zero frames")
    return p, t
