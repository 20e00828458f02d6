"""SSIM, PSNR, MAE and max-abs against scikit-image / numpy on seeded inputs.

Tolerances: SSIM 1e-4 absolute per frame (the acceptance bar; we see ~1e-8), PSNR 1e-9 dB,
MAE and max-abs exact for uint8 input.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from skimage.metrics import peak_signal_noise_ratio, structural_similarity

from harness import metrics
from harness.metrics import structural

SSIM_TOL = 1e-4


def sk_ssim(a: np.ndarray, b: np.ndarray, **kw: float) -> float:
    kw = {"data_range": 255.0, "sigma": 1.5, **kw}
    return float(
        structural_similarity(
            a,
            b,
            gaussian_weights=True,
            use_sample_covariance=False,
            channel_axis=-1 if a.ndim == 3 else None,
            **kw,
        )
    )


def test_ssim_matches_skimage_per_frame(frame_pair: tuple[np.ndarray, np.ndarray]) -> None:
    ref, test = frame_pair
    ours = metrics.ssim(test, ref)
    expected = np.array([sk_ssim(test[i], ref[i]) for i in range(len(ref))])
    assert ours.shape == (4,)
    np.testing.assert_allclose(ours, expected, atol=SSIM_TOL, rtol=0)
    assert np.all(np.diff(ours) < 0)  # more noise, lower SSIM: the fixture is meaningful


def test_ssim_matches_skimage_on_extremes(rng: np.random.Generator) -> None:
    flat = np.full((32, 40, 3), 128, np.uint8)
    noise = rng.integers(0, 256, (32, 40, 3), dtype=np.uint8)
    black = np.zeros((32, 40, 3), np.uint8)
    for a, b in [(flat, flat), (flat, noise), (noise, black), (black, black)]:
        assert metrics.ssim(a, b)[0] == pytest.approx(sk_ssim(a, b), abs=SSIM_TOL)
    assert metrics.ssim(noise, noise)[0] == pytest.approx(1.0, abs=1e-6)


def test_ssim_other_settings_match_skimage(rng: np.random.Generator) -> None:
    a = rng.random((40, 48))  # grey float image on a 0..1 scale
    b = np.clip(a + rng.normal(0, 0.05, a.shape), 0, 1)
    ours = metrics.ssim(a, b, data_range=1.0, sigma=1.0)
    assert ours[0] == pytest.approx(sk_ssim(a, b, data_range=1.0, sigma=1.0), abs=SSIM_TOL)


def test_ssim_accepts_torch_and_rejects_small_frames(
    frame_pair: tuple[np.ndarray, np.ndarray],
) -> None:
    ref, test = frame_pair
    np.testing.assert_allclose(
        metrics.ssim(torch.from_numpy(test), torch.from_numpy(ref)), metrics.ssim(test, ref)
    )
    with pytest.raises(ValueError, match="smaller than the 11x11"):
        metrics.ssim(np.zeros((8, 8, 3)), np.zeros((8, 8, 3)))
    with pytest.raises(ValueError, match="shape"):
        metrics.ssim(ref, ref[:2])


def test_psnr_matches_skimage(frame_pair: tuple[np.ndarray, np.ndarray]) -> None:
    ref, test = frame_pair
    expected = [peak_signal_noise_ratio(ref[i], test[i], data_range=255) for i in range(4)]
    np.testing.assert_allclose(metrics.psnr(test, ref), expected, rtol=0, atol=1e-9)


def test_psnr_of_identical_frames_is_inf(frame_pair: tuple[np.ndarray, np.ndarray]) -> None:
    ref, test = frame_pair
    video = np.concatenate([ref[:1], test[1:]])
    values = metrics.psnr(video, ref)
    assert values[0] == math.inf
    assert all(math.isfinite(v) for v in values[1:])
    result = metrics.PSNR()
    result.update(ref, ref)
    assert result.compute().value == math.inf


def test_mae_and_max_abs_match_numpy(frame_pair: tuple[np.ndarray, np.ndarray]) -> None:
    ref, test = frame_pair
    diff = np.abs(ref.astype(np.float64) - test.astype(np.float64))
    np.testing.assert_array_equal(metrics.mae(test, ref), diff.mean(axis=(1, 2, 3)))
    np.testing.assert_array_equal(metrics.max_abs(test, ref), diff.max(axis=(1, 2, 3)))


def test_mae_on_large_frames_is_exact(rng: np.random.Generator) -> None:
    # Bigger than one internal chunk, so the chunked sums are exercised (8-bit frames take the
    # int16 / float32-row path), with a short last chunk; 0 against 255 everywhere is the
    # largest sum of squares a float32 row must hold exactly; int8 takes the same path.
    a = rng.integers(0, 256, (3, 300, 400, 3), dtype=np.uint8)
    b = rng.integers(0, 256, (3, 300, 400, 3), dtype=np.uint8)
    a[2], b[2] = 0, 255
    signed = ((a // 2).astype(np.int8), (-(b // 2)).astype(np.int8))
    for x, y in ((a, b), signed):
        d = np.abs(x.astype(np.int64) - y)
        np.testing.assert_array_equal(metrics.mae(x, y), d.sum(axis=(1, 2, 3)) / d[0].size)
        sse = (d**2).sum(axis=(1, 2, 3))
        want = 10 * np.log10(255.0**2 / (sse / d[0].size))
        np.testing.assert_allclose(metrics.psnr(x, y), want, rtol=0, atol=1e-12)


def test_float_inputs_and_nan_propagate() -> None:
    a = np.zeros((16, 16, 3))
    b = a.copy()
    b[3, 3, 1] = np.nan
    assert math.isnan(metrics.mae(a, b)[0])
    assert math.isnan(metrics.max_abs(a, b)[0])
    assert math.isnan(metrics.psnr(a, b)[0])
    m = metrics.MAE()
    m.update(a, a)
    m.update(a, b)
    assert math.isnan(m.compute().value or 0.0)  # NaN can never pass a threshold


@pytest.mark.parametrize(("name", "worst_index"), [("ssim", 3), ("psnr", 3), ("mae", 3)])
def test_worst_frame_aggregation(
    frame_pair: tuple[np.ndarray, np.ndarray], name: str, worst_index: int
) -> None:
    ref, test = frame_pair
    metric = metrics.get(name)()
    metric.update(test[:2], ref[:2])  # updates accumulate frames
    metric.update(test[2:], ref[2:])
    result = metric.compute()
    assert result.per_frame is not None and len(result.per_frame) == 4
    assert result.value == result.per_frame[worst_index]
    worst = min if metric.higher_is_better else max
    assert result.value == worst(result.per_frame)
    mean = metrics.get(name)(reduce="mean")
    mean.update(test, ref)
    assert mean.compute().value == pytest.approx(float(np.mean(result.per_frame)))
    assert mean.compute().settings["reduce"] == "mean"


def test_ssim_result_records_settings(frame_pair: tuple[np.ndarray, np.ndarray]) -> None:
    ref, test = frame_pair
    m = metrics.SSIM()
    m.update(test, ref)
    r = m.compute()
    assert r.name == "ssim" and r.higher_is_better and r.status == "ok"
    assert r.settings["window_size"] == 11
    assert r.settings["sigma"] == 1.5
    assert r.settings["data_range"] == 255.0
    assert (r.settings["k1"], r.settings["k2"]) == (0.01, 0.03)
    assert r.settings["reduce"] == "worst"


def test_compute_before_update_is_an_error() -> None:
    with pytest.raises(ValueError, match="before any update"):
        metrics.SSIM().compute()


def test_ssim_threads_agree_and_torch_setting_is_restored(
    frame_pair: tuple[np.ndarray, np.ndarray],
) -> None:
    ref, test = frame_pair
    before = torch.get_num_threads()
    serial = metrics.ssim(test, ref, workers=1)
    parallel = metrics.ssim(test, ref, workers=3)
    np.testing.assert_array_equal(serial, parallel)
    assert torch.get_num_threads() == before


def test_ssim_of_many_small_frames_in_batches_matches_skimage(rng: np.random.Generator) -> None:
    # 32x48 RGB frames go 24 to a batch: 40 frames make two batches, the second one short.
    ref = rng.integers(0, 256, (40, 32, 48, 3), dtype=np.uint8)
    noise = rng.integers(-20, 21, ref.shape) * (np.arange(40)[:, None, None, None] % 7)
    test = np.clip(ref.astype(np.int64) + noise, 0, 255).astype(np.uint8)
    expected = np.array([sk_ssim(test[i], ref[i]) for i in range(len(ref))])
    for workers in (1, 2):
        ours = metrics.ssim(test, ref, workers=workers)
        np.testing.assert_allclose(ours, expected, atol=SSIM_TOL, rtol=0)
    assert np.all(np.diff(expected[:7]) < 0)  # more noise, lower SSIM: frames stay in order


def test_identical_frames_read_exactly_what_computing_them_gives(rng: np.random.Generator) -> None:
    # Frames equal to their reference are not filtered or differenced: SSIM 1, PSNR inf, MAE and
    # max-abs 0. That is exactly what the computation gives for them, checked here bit for bit,
    # and the other frames of the same video are computed as before.
    ref = rng.integers(0, 256, (9, 32, 32, 3), dtype=np.uint8)
    test = np.clip(ref.astype(np.int64) + rng.integers(-8, 9, ref.shape), 0, 255).astype(np.uint8)
    same = [0, 4, 8]
    test[same] = ref[same]
    differ = [1, 2, 3, 5, 6, 7]
    taps = structural._gaussian_taps(1.5, 3.5)
    computed = structural._ssim_frames(ref, ref.copy(), taps, 255.0, 0.01, 0.03, None)
    assert computed.tolist() == [1.0] * 9  # the filtered path on identical frames: exactly 1
    ours = metrics.ssim(test, ref)
    assert ours[same].tolist() == [1.0, 1.0, 1.0]
    expected = [sk_ssim(test[i], ref[i]) for i in differ]
    np.testing.assert_allclose(ours[differ], expected, atol=SSIM_TOL, rtol=0)
    assert np.all(ours[differ] < 1.0)
    d = np.abs(test.astype(np.int64) - ref).reshape(9, -1)
    np.testing.assert_array_equal(metrics.mae(test, ref), d.sum(axis=1) / d.shape[1])
    np.testing.assert_array_equal(metrics.max_abs(test, ref), d.max(axis=1))
    psnr = metrics.psnr(test, ref)
    assert np.isinf(psnr[same]).all() and np.isfinite(psnr[differ]).all()
    for i in differ:
        assert psnr[i] == pytest.approx(peak_signal_noise_ratio(ref[i], test[i], data_range=255))


def test_small_frames_share_chunks_and_nan_still_wins(rng: np.random.Generator) -> None:
    # 40 frames of 16x16x3 go many to a chunk; a NaN in one frame is that frame's alone.
    a = rng.random((40, 16, 16, 3))
    b = a + rng.normal(0.0, 0.01, a.shape)
    b[17, 3, 3, 1] = np.nan
    d = np.abs(a - b).reshape(40, -1)
    for name, want in (("mae", d.mean(axis=1)), ("max_abs", d.max(axis=1))):
        got = getattr(metrics, name)(a, b)
        assert math.isnan(got[17]), name
        keep = np.arange(40) != 17
        np.testing.assert_allclose(got[keep], want[keep], rtol=1e-12)
    assert math.isnan(metrics.psnr(a, b, data_range=1.0)[17])
    assert not np.isnan(np.delete(metrics.psnr(a, b, data_range=1.0), 17)).any()


def _flat(value: int, shape: tuple[int, ...] = (1, 16, 16, 3)) -> np.ndarray:
    return np.full(shape, value, dtype=np.uint8)


def _checker(h: int, w: int) -> np.ndarray:
    board = (np.indices((h, w)).sum(axis=0) % 2 * 255).astype(np.uint8)
    return np.repeat(board[None, :, :, None], 3, axis=-1)


def _adversarial_pairs(rng: np.random.Generator) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Frames where float32 filtering loses the most: flat frames at the range's ends (the
    variance is a difference of two ~16,000 numbers), one changed pixel, full-contrast
    checkerboards, anti-correlated noise, and a frame exactly one window in size."""
    one = _flat(255, (1, 33, 47, 3))
    one_off = one.copy()
    one_off[0, 16, 20, 1] = 254
    noise = rng.integers(0, 256, (3, 40, 50, 3), dtype=np.uint8)
    bright = rng.integers(250, 256, (2, 64, 64, 3), dtype=np.uint8)
    nudged = np.clip(bright.astype(np.int64) + rng.integers(-2, 3, bright.shape), 0, 255)
    return {
        "flat 0 vs 255": (_flat(0), _flat(255)),
        "flat 255 vs 254": (_flat(255), _flat(254)),
        "flat 7 vs 200": (_flat(7), _flat(200)),
        "one pixel differs": (one, one_off),
        "checkerboard vs its inverse": (_checker(32, 32), 255 - _checker(32, 32)),
        "checkerboard vs flat": (_checker(32, 32), _flat(255, (1, 32, 32, 3))),
        "noise vs noise": (noise, rng.integers(0, 256, noise.shape, dtype=np.uint8)),
        "noise vs its inverse": (noise, 255 - noise),
        "bright texture, +-2": (bright, nudged.astype(np.uint8)),
        "11x11: one valid pixel": (noise[:, :11, :11], 255 - noise[:, :11, :11]),
        "odd 13x29 grey": (noise[:, 3:16, 5:34, :1], noise[:, 4:17, 5:34, :1]),
    }


def test_ssim_matches_skimage_on_adversarial_frames(rng: np.random.Generator) -> None:
    for name, (a, b) in _adversarial_pairs(rng).items():
        expected = [sk_ssim(a[i], b[i]) for i in range(len(a))]
        np.testing.assert_allclose(
            metrics.ssim(a, b), expected, atol=SSIM_TOL, rtol=0, err_msg=name
        )


def test_ssim_of_frames_smaller_than_the_window_is_a_clear_error() -> None:
    for h, w in ((10, 40), (40, 10), (7, 9)):
        frames = np.zeros((2, h, w, 3), np.uint8)
        with pytest.raises(ValueError, match=rf"frames are {h}x{w}, smaller than the 11x11"):
            metrics.ssim(frames, frames)


def test_ssim_of_a_frame_in_bands_equals_it_whole(
    rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A frame larger than one convolution call is cut into bands of rows with the window's
    # halo; the bands must add up to the frame computed whole, for any band height (to float32
    # summation order: a misplaced halo row is off by ~1e-3).
    ref = rng.integers(0, 256, (2, 61, 37, 3), dtype=np.uint8)
    test = np.clip(ref.astype(np.int64) + rng.integers(-30, 31, ref.shape), 0, 255)
    test = test.astype(np.uint8)
    whole = metrics.ssim(test, ref)
    expected = [sk_ssim(test[i], ref[i]) for i in range(2)]
    np.testing.assert_allclose(whole, expected, atol=SSIM_TOL, rtol=0)
    # Bands are whole 8-row blocks: these make bands of 1 block (rows 1, 2, 7) and 5 blocks
    # (rows 50) of the 7 a frame has, the last band short and its last block 5/8 padding.
    for rows in (1, 2, 7, 50):
        monkeypatch.setattr(structural, "_BAND_ELEMS", (rows + 10) * 37 * 3)
        for workers in (1, 2):
            banded = metrics.ssim(test, ref, workers=workers)
            np.testing.assert_allclose(banded, whole, atol=1e-7, rtol=0, err_msg=f"{rows} rows")


def test_ssim_reports_nan_and_inf_frames_as_nan_and_identical_ones_as_1() -> None:
    # As before the convolution path: a frame holding NaN or +-inf (in the valid region or in
    # the border the window only partly covers) is NaN, never a passing value; a frame equal
    # to its reference element for element (infinities included) is 1.0.
    a = np.full((6, 20, 24, 3), 100.0)
    b = a.copy()
    b[0, 5, 5, 0] = np.nan
    b[1, 5, 5, 0] = np.inf
    b[2, 0, 0, 2] = -np.inf
    b[3, 19, 23, 1] = np.nan
    a[4, 7, 7, 1] = b[4, 7, 7, 1] = np.inf
    got = metrics.ssim(a, b)
    assert np.isnan(got[:4]).all()
    assert got[4:].tolist() == [1.0, 1.0]
    m = metrics.SSIM()
    m.update(a, b)
    assert math.isnan(m.compute().value or 0.0)


def test_ssim_of_flat_frames_is_the_luminance_term_alone() -> None:
    # Flat frames have no variance: SSIM is (2 mx my + C1) / (mx^2 + my^2 + C1) exactly. In
    # float32 about a fixed centre, 255 against 254 was 1.7e-5 off (var(x) + var(y) came out
    # as a difference of two ~32,000 numbers); each frame centred on its own mean makes it 0.
    a = np.concatenate([_flat(7), _flat(7), _flat(0), _flat(255)])
    b = np.concatenate([_flat(200), _flat(7), _flat(255), _flat(254)])
    c1 = (0.01 * 255) ** 2
    want = [
        (2 * 7 * 200 + c1) / (7**2 + 200**2 + c1),
        1.0,
        c1 / (255**2 + c1),
        (2 * 255 * 254 + c1) / (255**2 + 254**2 + c1),
    ]
    np.testing.assert_allclose(metrics.ssim(a, b), want, atol=1e-7, rtol=0)


def test_psnr_of_a_frame_with_an_infinite_pixel_is_minus_inf() -> None:
    # It raised "math domain error" (log10 of 0), so a check reported "could not be computed"
    # instead of a failing value; scikit-image and numpy read it as -inf.
    a = np.full((3, 16, 16, 3), 100.0)
    b = a.copy()
    b[0, 4, 4, 0] = np.inf
    b[1, 4, 4, 0] = np.nan
    got = metrics.psnr(a, b)
    assert got[0] == -math.inf and math.isnan(got[1]) and got[2] == math.inf
    m = metrics.PSNR()
    m.update(a, b)
    assert math.isnan(m.compute().value or 0.0)
