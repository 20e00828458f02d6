"""Audio SNR, MAD and LSD on synthetic signals with a known lag and a known noise level."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
from scipy import signal

from harness import metrics
from harness.media import AudioData

SR = 16000


def tone(n: int = SR, channels: int = 2) -> np.ndarray:
    t = np.arange(n) / SR
    base = 0.5 * np.sin(2 * np.pi * 220 * t) + 0.2 * np.sin(2 * np.pi * 1375 * t + 0.3)
    return np.stack([base * (1.0 - 0.2 * c) for c in range(channels)])


def delayed(x: np.ndarray, lag: int) -> np.ndarray:
    """``x`` arriving ``lag`` samples late (zeros first), same length."""
    out = np.zeros_like(x)
    out[:, lag:] = x[:, : x.shape[1] - lag]
    return out


def test_align_finds_known_lag(rng: np.random.Generator) -> None:
    # Broadband reference so the correlation peak is unique.
    target = rng.standard_normal((2, 8000)) * 0.1
    for lag in (0, 37, 400):
        p, t, found = metrics.align(delayed(target, lag), target, max_lag=1000)
        assert found == lag
        np.testing.assert_array_equal(p, t[:, : p.shape[1]])
    # pred early: negative lag
    _, _, found = metrics.align(target[:, 25:], target, max_lag=100)
    assert found == -25


def test_align_respects_max_lag(rng: np.random.Generator) -> None:
    target = rng.standard_normal((1, 4000))
    _, _, found = metrics.align(delayed(target, 300), target, max_lag=100)
    assert abs(found) <= 100
    _, _, found = metrics.align(delayed(target, 300), target, max_lag=0)
    assert found == 0


def test_snr_of_known_noise_after_alignment(rng: np.random.Generator) -> None:
    target = tone()
    noise_std = 0.01
    pred = delayed(target, 123) + rng.normal(0.0, noise_std, target.shape)
    expected = 10 * math.log10(np.mean(target**2) / noise_std**2)  # ~ 30.6 dB
    assert metrics.audio_snr(pred, target, max_lag=500) == pytest.approx(expected, abs=0.2)
    # Without alignment the same pair is far worse: the lag matters.
    assert metrics.audio_snr(pred, target, max_lag=0) < expected - 10


def test_snr_identical_is_inf_and_nan_propagates() -> None:
    x = tone(4000)
    assert metrics.audio_snr(x, x) == math.inf
    y = x.copy()
    y[0, 10] = np.nan
    assert math.isnan(metrics.audio_snr(y, x, max_lag=0))


def test_mad_of_known_offset() -> None:
    x = tone(4000, channels=1)
    assert metrics.audio_mad(x + 0.01, x, max_lag=0) == pytest.approx(0.01, rel=1e-9)
    assert metrics.audio_mad(x, x) == 0.0


def _lsd_reference(p: np.ndarray, t: np.ndarray, n_fft: int = 512, eps: float = 1e-10) -> float:
    """Independent LSD: explicit framing + numpy rfft, same window scaling as scipy's stft."""
    win = signal.get_window("hann", n_fft)
    hop = n_fft // 4
    dists = []
    for ch in range(p.shape[0]):
        for start in range(0, p.shape[1] - n_fft + 1, hop):
            fp = np.fft.rfft(p[ch, start : start + n_fft] * win) / win.sum()
            ft = np.fft.rfft(t[ch, start : start + n_fft] * win) / win.sum()
            d = 10 * np.log10(np.abs(fp) ** 2 + eps) - 10 * np.log10(np.abs(ft) ** 2 + eps)
            dists.append(np.sqrt(np.mean(d**2)))
    return float(np.mean(dists))


def test_lsd_matches_independent_implementation(rng: np.random.Generator) -> None:
    t = tone(6000) + rng.normal(0, 0.01, (2, 6000))
    p = t * 0.8 + rng.normal(0, 0.02, t.shape)
    ours = metrics.audio_lsd(p, t, max_lag=0)
    assert ours == pytest.approx(_lsd_reference(p, t), rel=1e-9)


def test_lsd_of_known_gain(rng: np.random.Generator) -> None:
    t = rng.standard_normal((1, 8000)) * 0.1  # broadband: eps only matters in rare near-empty bins
    assert metrics.audio_lsd(2.0 * t, t) == pytest.approx(20 * math.log10(2.0), abs=1e-3)
    assert metrics.audio_lsd(t, t) == 0.0
    with pytest.raises(ValueError, match="shorter than the LSD frame"):
        metrics.audio_lsd(t[:, :100], t[:, :100])


def test_audio_metric_classes(rng: np.random.Generator) -> None:
    target = tone(8000)
    good = AudioData(
        pcm=(target + rng.normal(0, 0.001, target.shape)).astype(np.float32),
        sample_rate=SR,
        codec="pcm_f32le",
    )
    bad = AudioData(
        pcm=(target + rng.normal(0, 0.05, target.shape)).astype(np.float32),
        sample_rate=SR,
        codec="pcm_f32le",
    )
    ref = AudioData(pcm=target.astype(np.float32), sample_rate=SR, codec="pcm_f32le")
    snr = metrics.get("audio_snr")()
    snr.update(good, ref)
    snr.update(bad, ref)
    r = snr.compute()
    assert r.per_frame is None
    assert r.unit == "dB" and r.higher_is_better
    assert r.value == pytest.approx(metrics.audio_snr(bad, ref))
    # The window is bounded in time: 50 ms is 800 samples at 16 kHz (not 0.3 s of samples).
    assert r.settings["max_lag_ms"] == 50.0 and r.settings["max_lag_samples"] == 800
    lsd = metrics.get("audio_lsd")()
    lsd.update(good, ref)
    lsd.update(bad, ref)
    assert lsd.compute().value == pytest.approx(metrics.audio_lsd(bad, ref))
    assert lsd.compute().settings["n_fft"] == 512
    mad = metrics.get("audio_mad")()
    with pytest.raises(ValueError, match="Hz"):
        mad.update(good, AudioData(pcm=ref.pcm, sample_rate=8000, codec="x"))


def test_audio_rejects_mismatched_channels() -> None:
    with pytest.raises(ValueError, match="channels"):
        metrics.audio_snr(tone(1000, 2), tone(1000, 1))
    with pytest.raises(ValueError, match="max_lag"):
        metrics.audio_snr(tone(1000), tone(1000), max_lag=-1)


def test_a_desync_beyond_the_window_is_not_aligned_away(rng: np.random.Generator) -> None:
    # 0.25 s late at 16 kHz: the old 4,800-sample window (0.3 s here) aligned it away and the
    # SNR read as a match; a window bounded in time (50 ms) does not.
    target = (rng.standard_normal(SR * 2) * 0.1).astype(np.float32)
    late = np.concatenate([np.zeros(SR // 4, np.float32), target])[: target.size]
    ref = AudioData(pcm=target, sample_rate=SR, codec="pcm_f32le")
    pred = AudioData(pcm=late, sample_rate=SR, codec="pcm_f32le")
    assert metrics.audio_snr(late, target, max_lag=4800) > 40  # what the old default allowed
    snr = metrics.get("audio_snr")()
    snr.update(pred, ref)
    assert snr.compute().value < 1.0
    lag = metrics.get("audio_lag_ms")()
    lag.update(pred, ref)
    result = lag.compute()
    assert result.unit == "ms" and not result.higher_is_better
    assert result.value > 50.0  # beyond the window: never reads as in sync


def test_audio_lag_is_measured_in_milliseconds(rng: np.random.Generator) -> None:
    target = (rng.standard_normal(SR) * 0.1).astype(np.float32)
    for shift in (0, 16, 160):  # 0, 1 and 10 ms at 16 kHz
        late = np.concatenate([np.zeros(shift, np.float32), target])[: target.size]
        ms = metrics.audio_lag_ms(late, target, sample_rate=SR)
        assert ms == pytest.approx(1000.0 * shift / SR), shift
    with pytest.raises(ValueError, match="sample rate"):
        metrics.get("audio_lag_ms")().update(target, target)


def test_shared_alignment_correlates_a_pair_once_and_changes_no_value(
    rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harness.metrics import audio

    target = rng.standard_normal((2, 6000)) * 0.1
    pred = delayed(target, 30) + rng.standard_normal(target.shape) * 1e-3
    other = delayed(target, 90)

    def all_three(p: np.ndarray) -> tuple[float, float, float]:
        return (
            metrics.audio_snr(p, target, max_lag=800),
            metrics.audio_lsd(p, target, max_lag=800),
            metrics.audio_lag_ms(p, target, sample_rate=SR),  # a wider window, same correlation
        )

    alone = all_three(pred), all_three(other)
    calls: list[int] = []
    real = audio.cross_correlation
    monkeypatch.setattr(audio, "cross_correlation", lambda *a: calls.append(1) or real(*a))
    with audio.shared_alignment():
        shared = all_three(pred), all_three(other)
        assert len(calls) == 2  # one per pair of clips, not one per metric
        changed = pred.copy()
        changed[:, 100] += 0.5  # other content, other correlation
        assert all_three(changed) != shared[0]
        assert len(calls) == 3
    assert shared == alone
    all_three(pred)
    assert len(calls) == 3 + 3  # outside the block nothing is kept


def test_identical_clips_align_at_zero_without_correlating_as_correlating_would(
    rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harness.metrics import audio

    noise = rng.standard_normal((2, 6000)) * 0.1
    # A periodic clip correlates with itself as well at every period: the tie goes to lag 0.
    periodic = np.tile(np.sin(np.arange(100) / 100 * 2 * np.pi), (2, 60)) * 0.5
    calls: list[int] = []
    real = audio.cross_correlation
    for clip in (noise, periodic, np.zeros((2, 6000))):
        corr, lags = audio._correlation(clip, clip)  # what alignment would search
        keep = np.abs(lags) <= 800
        best = corr[keep].max()
        assert abs(corr[keep][lags[keep] == 0][0] - best) <= 1e-12 * max(1.0, abs(best))
        monkeypatch.setattr(audio, "cross_correlation", lambda *a: calls.append(1) or real(*a))
        copy = clip.copy()
        assert metrics.align(copy, clip, max_lag=800)[2] == 0
        assert metrics.audio_snr(copy, clip, max_lag=800) == math.inf
        assert metrics.audio_lsd(copy, clip, max_lag=800) == 0.0
        assert metrics.audio_lag_ms(copy, clip, sample_rate=SR) == 0.0
        assert calls == []  # identical clips are never correlated
        monkeypatch.setattr(audio, "cross_correlation", real)
    shifted = delayed(noise, 30)
    assert metrics.align(shifted, noise, max_lag=800)[2] == 30  # a real lag is still found
    with_nan = noise.copy()
    with_nan[0, 10] = np.nan
    assert math.isnan(metrics.audio_snr(with_nan, with_nan.copy(), max_lag=800))


def test_cross_correlation_is_scipy_signals_full_correlation_with_its_lags(
    rng: np.random.Generator,
) -> None:
    from harness.metrics.audio import cross_correlation

    for na, nb in ((6000, 6000), (5000, 6100), (7, 3), (3, 9), (1, 1)):
        a, b = rng.standard_normal(na), rng.standard_normal(nb)
        corr, lags = cross_correlation(a, b)
        want = signal.correlate(a, b, mode="full", method="direct")
        np.testing.assert_array_equal(lags, signal.correlation_lags(na, nb, mode="full"))
        np.testing.assert_allclose(corr, want, rtol=0, atol=1e-12 * np.abs(want).max())
        assert lags[np.argmax(corr)] == lags[np.argmax(want)]


def test_audio_metrics_import_no_scipy() -> None:
    """Importing scipy.signal costs a worker 1.0-1.5 s of CPU, scipy.fft ~0.4 s; the audio
    checks use numpy's FFT (a fresh interpreter, so nothing imported before hides an import)."""
    code = (
        "import sys, numpy as np\n"
        "from harness import metrics\n"
        "rng = np.random.default_rng(0)\n"
        "t = rng.standard_normal((2, 6000)); p = np.roll(t, 30, axis=1) * 0.9\n"
        "metrics.audio_snr(p, t, max_lag=800); metrics.audio_lsd(p, t, max_lag=800)\n"
        "assert metrics.audio_lag_ms(p, t, sample_rate=16000) > 0\n"
        "print(sorted(m for m in sys.modules if m == 'scipy' or m.startswith('scipy.')))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["[]"]
