"""Audio metrics against a reference track: SNR, mean absolute difference, log-spectral distance.

Encoders and resamplers shift audio by a few samples (AAC priming, filter delay), so every
metric first aligns ``pred`` to ``target`` by the lag that maximises their cross-correlation
within a window bounded in time (``max_lag_ms``, 50 ms by default: more than any codec delay we
know of, far less than an audible A/V desync), then compares the overlap. The lag found is a
metric of its own, ``audio_lag_ms``, so a desync is measured and can fail a case instead of
being aligned away. ``max_lag_ms=0`` turns alignment off.

Inputs are PCM arrays ``[channels, samples]`` or ``[samples]`` (numpy, torch or ``AudioData``),
full scale +-1.
"""

from __future__ import annotations

import contextvars
import functools
import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

import numpy as np

from harness.metrics._base import Metric, Reduce, as_numpy
from harness.probe.content import _hasher

__all__ = [
    "AudioLSD",
    "AudioLag",
    "AudioMAD",
    "AudioSNR",
    "align",
    "audio_lag_ms",
    "audio_lsd",
    "audio_mad",
    "audio_snr",
    "lag_samples",
    "shared_alignment",
]

#: The alignment window in time: AAC priming (1024-2112 samples) is 21-44 ms at 48 kHz, 64 ms
#: at 16 kHz would already be a visible desync, so the window does not grow with the rate.
DEFAULT_MAX_LAG_MS = 50.0
#: The window in samples for the functional twins' ``max_lag`` (50 ms at 48 kHz).
DEFAULT_MAX_LAG = 2400
#: LSD frame: 512-sample Hann window, hop 128.
DEFAULT_N_FFT = 512
#: Power floor before taking logs, so digital silence does not give -inf dB.
LSD_EPS = 1e-10


def _pcm(x: Any, arg: str) -> np.ndarray:
    a = np.asarray(as_numpy(x, arg), dtype=np.float64)
    if a.ndim == 1:
        a = a[None, :]
    if a.ndim != 2 or a.shape[1] == 0:
        raise ValueError(f"{arg} has shape {a.shape}, expected [channels, samples] or [samples]")
    return a


_Correlation = tuple[np.ndarray, np.ndarray]  # (correlation, lags) of the channel means
_SHARED: contextvars.ContextVar[dict[tuple[str, str], _Correlation] | None] = (
    contextvars.ContextVar("harness_shared_alignment", default=None)
)


@contextmanager
def shared_alignment() -> Iterator[None]:
    """Within the block, the cross-correlation of the same two clips (by content) is computed
    once, whatever the window: one attempt's SNR, LSD and lag checks of one output share it.
    Outside any block nothing is kept."""
    token = _SHARED.set({}) if _SHARED.get() is None else None
    try:
        yield
    finally:
        if token is not None:
            _SHARED.reset(token)


def _digest(a: np.ndarray) -> str:
    """Content key of a clip, with the probe's content hasher (blake3, ~5x blake2b here)."""
    h = _hasher()
    h.update(f"{a.dtype}{a.shape}".encode())
    h.update(np.ascontiguousarray(a).data.cast("B"))
    return str(h.hexdigest())


def cross_correlation(a: np.ndarray, b: np.ndarray) -> _Correlation:
    """``scipy.signal.correlate(a, b, mode="full")`` of two 1-D signals with its lags
    (``scipy.signal.correlation_lags``): ``corr[i] = sum_n a[n + lags[i]] * b[n]``, computed by
    FFT as scipy's FFT method does (zero-padded, here to a power of two).

    numpy's FFT, not scipy's: a worker that checks audio would otherwise import ``scipy.fft``
    (~0.4 s of CPU) or ``scipy.signal`` (1.0-1.5 s), and numpy is imported already.
    """
    n = a.size + b.size - 1
    nfft = 1 << (n - 1).bit_length()
    spectrum = np.fft.rfft(a, nfft)
    spectrum *= np.conj(np.fft.rfft(b, nfft))
    circular = np.fft.irfft(spectrum, nfft)
    # Circular lag k >= 0 sits at index k, lag -m at index nfft - m.
    corr = np.concatenate([circular[nfft - (b.size - 1) :], circular[: a.size]])
    return corr, np.arange(-(b.size - 1), a.size)


def _correlation(p: np.ndarray, t: np.ndarray) -> _Correlation:
    cache = _SHARED.get()
    key = (_digest(p), _digest(t)) if cache is not None else None
    if cache is not None and key in cache:
        return cache[key]
    corr, lags = cross_correlation(p.mean(axis=0), t.mean(axis=0))
    if cache is not None and key is not None:
        corr.flags.writeable = False
        lags.flags.writeable = False
        cache[key] = (corr, lags)
    return corr, lags


def align(
    pred: Any, target: Any, *, max_lag: int = DEFAULT_MAX_LAG
) -> tuple[np.ndarray, np.ndarray, int]:
    """Align ``pred`` to ``target``; returns ``(pred_overlap, target_overlap, lag)``.

    ``lag`` > 0 means ``pred`` runs late: ``pred[n + lag]`` matches ``target[n]``. The lag is
    searched on the channel mean, ties go to the smallest ``|lag|``.
    """
    p = _pcm(pred, "pred")
    t = _pcm(target, "target")
    if p.shape[0] != t.shape[0]:
        raise ValueError(f"pred has {p.shape[0]} channels but target has {t.shape[0]}")
    if isinstance(max_lag, bool) or not isinstance(max_lag, int) or max_lag < 0:
        raise ValueError(f"max_lag is {max_lag!r}, expected an int >= 0")
    lag = 0
    # Identical clips align at lag 0 without correlating: no lag correlates a clip with itself
    # more than lag 0 does (Cauchy-Schwarz), and ties go to the smallest |lag|.
    if max_lag > 0 and not (p.shape == t.shape and np.array_equal(p, t)):
        corr, lags = _correlation(p, t)
        keep = np.abs(lags) <= max_lag
        corr, lags = corr[keep], lags[keep]
        if corr.size and np.isfinite(corr).all():
            best = corr.max()
            # Flat correlation (e.g. silence) must not pick an arbitrary edge lag.
            candidates = lags[corr >= best - 1e-12 * max(1.0, abs(best))]
            lag = int(candidates[np.argmin(np.abs(candidates))])
    if lag >= 0:
        p = p[:, lag:]
    else:
        t = t[:, -lag:]
    n = min(p.shape[1], t.shape[1])
    if n == 0:
        raise ValueError(f"pred and target do not overlap after aligning by {lag} samples")
    return p[:, :n], t[:, :n], lag


def lag_samples(max_lag_ms: float, sample_rate: int) -> int:
    """The alignment window in samples for a window of ``max_lag_ms`` at ``sample_rate``."""
    if not math.isfinite(max_lag_ms) or max_lag_ms < 0:
        raise ValueError(f"max_lag_ms is {max_lag_ms!r}, expected a finite number >= 0")
    if isinstance(sample_rate, bool) or not isinstance(sample_rate, int) or sample_rate <= 0:
        raise ValueError(f"sample_rate is {sample_rate!r}, expected a positive int (Hz)")
    return round(max_lag_ms * sample_rate / 1000.0)


def audio_lag_ms(
    pred: Any, target: Any, *, sample_rate: int, max_lag_ms: float = DEFAULT_MAX_LAG_MS
) -> float:
    """How far ``pred`` is shifted against ``target``, in milliseconds (absolute value).

    The lag is searched within ``max_lag_ms``; a shift beyond the window is reported as the
    window itself plus one sample, so it can never read as in sync.
    """
    window = lag_samples(max_lag_ms, sample_rate)
    wide = max(window * 4, window + 1)
    _, _, lag = align(pred, target, max_lag=wide)
    return 1000.0 * min(abs(lag), window + 1) / sample_rate


def audio_snr(pred: Any, target: Any, *, max_lag: int = DEFAULT_MAX_LAG) -> float:
    """SNR in dB of ``pred`` against ``target`` after alignment: ``10 log10(sum t^2 / sum
    (p - t)^2)``. ``inf`` for identical audio, ``nan`` if either holds a NaN.

    >>> import numpy as np
    >>> x = np.sin(np.arange(1000) / 10)
    >>> audio_snr(x, x)
    inf
    """
    p, t, _ = align(pred, target, max_lag=max_lag)
    noise = float(np.sum((p - t) ** 2))
    sig = float(np.sum(t**2))
    if math.isnan(noise) or math.isnan(sig):
        return math.nan
    if noise == 0.0:
        return math.inf
    if sig == 0.0:
        return -math.inf
    return 10.0 * math.log10(sig / noise)


def audio_mad(pred: Any, target: Any, *, max_lag: int = DEFAULT_MAX_LAG) -> float:
    """Mean absolute PCM difference (full scale 1.0) after alignment."""
    p, t, _ = align(pred, target, max_lag=max_lag)
    return float(np.mean(np.abs(p - t)))


def audio_lsd(
    pred: Any, target: Any, *, max_lag: int = DEFAULT_MAX_LAG, n_fft: int = DEFAULT_N_FFT
) -> float:
    """Log-spectral distance in dB after alignment.

    Power spectra from ``scipy.signal.stft`` (Hann window of ``n_fft``, hop ``n_fft // 4``, no
    boundary padding); per STFT frame ``sqrt(mean_f (10 log10 (P_pred + eps) - 10 log10
    (P_target + eps))^2)``, then the mean over frames and channels. 0 for identical audio.
    """
    p, t, _ = align(pred, target, max_lag=max_lag)
    if p.shape[1] < n_fft:
        raise ValueError(
            f"audio overlap is {p.shape[1]} samples, shorter than the LSD frame n_fft={n_fft}"
        )
    if np.array_equal(p, t):
        return 0.0  # equal spectra: every log difference is 0
    power = _power_spectra(np.stack([p, t]), n_fft)
    power += LSD_EPS
    # 10 log10(P_pred) - 10 log10(P_target) as one log of the ratio (half the logs), and the
    # factor 10 outside the root: sqrt(mean((10 x)^2)) = 10 sqrt(mean(x^2)).
    ratio = np.divide(power[0], power[1])
    np.log10(ratio, out=ratio)
    np.multiply(ratio, ratio, out=ratio)
    # [channels, frames, freqs]: mean over frequency, sqrt, then over frames and channels.
    per_frame = np.sqrt(ratio.mean(axis=-1))
    return float(10.0 * np.mean(per_frame))


def _power_spectra(x: np.ndarray, n_fft: int) -> np.ndarray:
    """``|scipy.signal.stft(x, window="hann", nperseg=n_fft, noverlap=n_fft - n_fft // 4,
    boundary=None, padded=False, detrend=False)|^2`` with frames before frequencies: the same
    frames, periodic Hann window and "spectrum" scaling, in one ``rfft`` over every frame of
    every clip (scipy's general STFT cost more than the transform on short clips); numpy's
    FFT, as :func:`cross_correlation`'s."""
    frames = np.lib.stride_tricks.sliding_window_view(x, n_fft, axis=-1)[..., :: n_fft // 4, :]
    spectrum = np.fft.rfft(frames * _scaled_hann(n_fft), axis=-1)
    power = np.square(spectrum.real)
    power += np.square(spectrum.imag)
    return power


@functools.cache
def _scaled_hann(n_fft: int) -> np.ndarray:
    """The periodic Hann window scipy.signal.stft uses (``get_window("hann", n_fft)``, to
    within 2.3e-16), over its sum ("spectrum" scaling)."""
    window = 0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(n_fft) / n_fft)
    scaled = window / window.sum()
    scaled.flags.writeable = False
    return scaled


class _AudioMetric(Metric):
    reports_per_frame: ClassVar[bool] = False

    def __init__(
        self,
        *,
        max_lag_ms: float = DEFAULT_MAX_LAG_MS,
        sample_rate: int | None = None,
        max_lag: int | None = None,
        reduce: Reduce = "worst",
    ) -> None:
        super().__init__(reduce=reduce)
        self.max_lag_ms = float(max_lag_ms)
        self.sample_rate = sample_rate
        self._max_lag = max_lag  # an explicit window in samples wins over max_lag_ms

    def _rate(self, pred: Any, target: Any) -> int:
        rp = getattr(pred, "sample_rate", None)
        rt = getattr(target, "sample_rate", None)
        if rp is not None and rt is not None and rp != rt:
            raise ValueError(f"pred is sampled at {rp} Hz but target at {rt} Hz")
        rate = self.sample_rate or rp or rt
        if rate is None:
            raise ValueError(
                f"{self.name} needs the sample rate to bound the alignment in time: pass "
                "sample_rate=... or AudioData"
            )
        return int(rate)

    @property
    def max_lag(self) -> int:
        if self._max_lag is not None:
            return self._max_lag
        if self.sample_rate is None:
            return DEFAULT_MAX_LAG
        return lag_samples(self.max_lag_ms, self.sample_rate)

    @property
    def settings(self) -> dict[str, Any]:
        """Alignment window (in time and in samples) and reduction over clips."""
        return {
            "max_lag_ms": self.max_lag_ms,
            "max_lag_samples": self.max_lag,
            "sample_rate": self.sample_rate,
            "align": "cross-correlation of channel mean",
            "reduce": self.reduce,
        }

    def update(self, pred: Any, target: Any) -> None:
        """Compare one clip; ``AudioData`` inputs must share a sample rate."""
        rate = self._rate(pred, target)
        if self.sample_rate is None:
            self.sample_rate = rate
        super().update(pred, target)


class AudioLag(_AudioMetric):
    """The A/V-relevant shift of the audio against its reference, in ms (lower is better)."""

    name: ClassVar[str] = "audio_lag_ms"
    unit: ClassVar[str] = "ms"
    higher_is_better: ClassVar[bool] = False

    def _measure(self, pred: Any, target: Any) -> list[float]:
        assert self.sample_rate is not None  # set by update()
        return [
            audio_lag_ms(pred, target, sample_rate=self.sample_rate, max_lag_ms=self.max_lag_ms)
        ]


class AudioSNR(_AudioMetric):
    """SNR in dB after alignment (higher is better); ``value`` is the worst clip."""

    name: ClassVar[str] = "audio_snr"
    unit: ClassVar[str] = "dB"
    higher_is_better: ClassVar[bool] = True

    def _measure(self, pred: Any, target: Any) -> list[float]:
        return [audio_snr(pred, target, max_lag=self.max_lag)]


class AudioMAD(_AudioMetric):
    """Mean absolute PCM difference after alignment (lower is better)."""

    name: ClassVar[str] = "audio_mad"
    unit: ClassVar[str] = "full scale"
    higher_is_better: ClassVar[bool] = False

    def _measure(self, pred: Any, target: Any) -> list[float]:
        return [audio_mad(pred, target, max_lag=self.max_lag)]


class AudioLSD(_AudioMetric):
    """Log-spectral distance in dB after alignment (lower is better)."""

    name: ClassVar[str] = "audio_lsd"
    unit: ClassVar[str] = "dB"
    higher_is_better: ClassVar[bool] = False

    def __init__(
        self,
        *,
        max_lag_ms: float = DEFAULT_MAX_LAG_MS,
        sample_rate: int | None = None,
        max_lag: int | None = None,
        n_fft: int = DEFAULT_N_FFT,
        reduce: Reduce = "worst",
    ) -> None:
        super().__init__(
            max_lag_ms=max_lag_ms, sample_rate=sample_rate, max_lag=max_lag, reduce=reduce
        )
        self.n_fft = n_fft

    @property
    def settings(self) -> dict[str, Any]:
        """Alignment plus the STFT frame and power floor."""
        return {
            **super().settings,
            "n_fft": self.n_fft,
            "hop": self.n_fft // 4,
            "window": "hann",
            "eps": LSD_EPS,
        }

    def _measure(self, pred: Any, target: Any) -> list[float]:
        return [audio_lsd(pred, target, max_lag=self.max_lag, n_fft=self.n_fft)]
