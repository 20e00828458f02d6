"""Fixtures for the media and metric tests: seeded frames, real encoded media files."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest


def smooth_frames(rng: np.random.Generator, t: int, h: int, w: int, c: int = 3) -> np.ndarray:
    """Blocky low-frequency content plus fine noise: SSIM on it is neither ~0 nor ~1."""
    coarse = rng.integers(0, 256, (t, h // 8 + 1, w // 8 + 1, c))
    up = np.repeat(np.repeat(coarse, 8, axis=1), 8, axis=2)[:, :h, :w]
    return np.clip(up + rng.integers(-10, 11, up.shape), 0, 255).astype(np.uint8)


def degrade(rng: np.random.Generator, frames: np.ndarray, sigma: float) -> np.ndarray:
    """Add seeded Gaussian noise of ``sigma`` levels."""
    noisy = frames.astype(np.float64) + rng.normal(0.0, sigma, frames.shape)
    return np.clip(np.round(noisy), 0, 255).astype(np.uint8)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


@pytest.fixture
def frame_pair(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A seeded 4x64x80x3 uint8 reference and a copy with noise growing per frame (sigma 2, 5,
    10, 20), so frame 3 is the worst by every image metric."""
    ref = smooth_frames(rng, 4, 64, 80)
    test = np.stack([degrade(rng, ref[i], s) for i, s in enumerate((2.0, 5.0, 10.0, 20.0))])
    return ref, test


def write_av_file(
    path: Path,
    *,
    n_frames: int = 6,
    width: int = 64,
    height: int = 48,
    audio: bool = True,
    video_codec: str = "libx264",
) -> np.ndarray:
    """Encode a short clip (H.264 + AAC by default) with PyAV; returns the frames written."""
    frames = (
        np.stack([np.full((height, width, 3), 20 + 30 * i, np.uint8) for i in range(n_frames)])
        if n_frames
        else np.zeros((0, height, width, 3), np.uint8)
    )
    with av.open(str(path), "w") as container:
        vs: Any = container.add_stream(video_codec, rate=8)
        vs.width, vs.height, vs.pix_fmt = width, height, "yuv420p"
        if video_codec == "libx264":
            vs.options = {"crf": "10", "preset": "ultrafast"}
        aus = container.add_stream("aac", rate=16000, layout="mono") if audio else None
        for i, img in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(img, format="rgb24")
            frame.pts = i
            container.mux(vs.encode(frame))
        if n_frames:
            container.mux(vs.encode(None))
        if aus is not None:
            t = np.arange(16000) / 16000.0
            pcm = (0.3 * np.sin(2 * np.pi * 440.0 * t)).astype(np.float32)[None]
            for k in range(0, pcm.shape[1], 1024):
                af = av.AudioFrame.from_ndarray(pcm[:, k : k + 1024], format="fltp", layout="mono")
                af.sample_rate, af.pts = 16000, k
                container.mux(aus.encode(af))
            container.mux(aus.encode(None))
    return frames


WriteAV = Callable[..., np.ndarray]


@pytest.fixture(scope="session")
def make_av_file() -> WriteAV:
    """:func:`write_av_file`, for tests that need a variant clip."""
    return write_av_file


@pytest.fixture(scope="session")
def av_clip(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    """A valid 6-frame 64x48 H.264 + AAC MP4 and the frames that went in."""
    path = tmp_path_factory.mktemp("media") / "clip.mp4"
    return path, write_av_file(path)
