"""Quality metrics for comparing outputs with pinned references.

Each metric is a small class (``name``, ``unit``, ``higher_is_better``, ``update``,
``compute`` -> :class:`MetricResult`) with a plain functional twin returning per-frame values:

========== ======================= ==================== ===========
name       class                   functional           better
========== ======================= ==================== ===========
ssim       :class:`SSIM`           :func:`ssim`         higher
psnr       :class:`PSNR`           :func:`psnr`         higher (dB)
mae        :class:`MAE`            :func:`mae`          lower
max_abs    :class:`MaxAbs`         :func:`max_abs`      lower
clip       :class:`CLIPSimilarity` :func:`clip_similarity` higher
audio_snr  :class:`AudioSNR`       :func:`audio_snr`    higher (dB)
audio_mad  :class:`AudioMAD`       :func:`audio_mad`    lower
audio_lsd  :class:`AudioLSD`       :func:`audio_lsd`    lower (dB)
========== ======================= ==================== ===========

plus :func:`count_nonfinite`. Importing this package loads only numpy: torch, scipy,
scikit-image and transformers are imported inside the functions that need them.

Example::

    from harness import metrics

    m = metrics.get("ssim")()
    m.update(head.frames, reference.frames)
    result = m.compute()          # MetricResult(name="ssim", value=<worst frame>, ...)
"""

from __future__ import annotations

from harness.errors import MetricNotRun, UnknownMetricError
from harness.metrics._base import (
    Metric,
    MetricResult,
    Reduce,
    aggregate,
)
from harness.metrics.audio import (
    AudioLag,
    AudioLSD,
    AudioMAD,
    AudioSNR,
    align,
    audio_lag_ms,
    audio_lsd,
    audio_mad,
    audio_snr,
)
from harness.metrics.clip import CLIPSimilarity, clip_similarity
from harness.metrics.finite import count_nonfinite
from harness.metrics.pixel import MAE, PSNR, MaxAbs, mae, max_abs, psnr
from harness.metrics.structural import SSIM, ssim

__all__ = [
    "MAE",
    "PSNR",
    "SSIM",
    "AudioLSD",
    "AudioLag",
    "AudioMAD",
    "AudioSNR",
    "CLIPSimilarity",
    "MaxAbs",
    "Metric",
    "MetricNotRun",
    "MetricResult",
    "Reduce",
    "UnknownMetricError",
    "aggregate",
    "align",
    "audio_lag_ms",
    "audio_lsd",
    "audio_mad",
    "audio_snr",
    "clip_similarity",
    "count_nonfinite",
    "get",
    "mae",
    "max_abs",
    "names",
    "psnr",
    "ssim",
]

_REGISTRY: dict[str, type[Metric]] = {
    cls.name: cls
    for cls in (SSIM, PSNR, MAE, MaxAbs, CLIPSimilarity, AudioSNR, AudioMAD, AudioLSD, AudioLag)
}


def names() -> tuple[str, ...]:
    """The registered metric names, in a stable order."""
    return tuple(_REGISTRY)


def get(name: str) -> type[Metric]:
    """The metric class registered under ``name``.

    >>> get("psnr").higher_is_better
    True
    """
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise UnknownMetricError(
            f"unknown metric {name!r}; known metrics: {', '.join(_REGISTRY)}"
        ) from None
