"""``harness.media.write_mp4``, the MP4 writer the diffusers scenarios export through: H.264
and optional AAC (mono or stereo), the same bytes every time, never a partial file."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from harness import media
from harness.errors import MediaError


def frames(t: int = 9, h: int = 32, w: int = 32) -> np.ndarray:
    rng = np.random.default_rng(0)
    return rng.integers(0, 256, size=(t, h, w, 3), dtype=np.uint8)


def stereo(n: int = 5284) -> np.ndarray:
    t = np.arange(n, dtype=np.float32) / 16_000
    return np.stack([np.sin(2 * np.pi * 440 * t), np.sin(2 * np.pi * 660 * t)]) * 0.5


def test_video_and_stereo_audio_decode_back_and_bytes_repeat(tmp_path: Path) -> None:
    a = media.write_mp4(tmp_path / "a.mp4", frames(), stereo(), fps=25, sample_rate=16_000)
    b = media.write_mp4(tmp_path / "b.mp4", frames(), stereo(), fps=25, sample_rate=16_000)
    assert hashlib.sha256(a.read_bytes()).digest() == hashlib.sha256(b.read_bytes()).digest()
    video = media.decode_video(a)
    assert video.frames.shape == (9, 32, 32, 3) and video.codec == "h264"
    assert video.fps == pytest.approx(25)
    audio = media.decode_audio(a)
    assert audio.pcm.shape[0] == 2 and audio.sample_rate == 16_000 and audio.codec == "aac"
    assert audio.pcm.shape[1] >= 5284  # AAC pads to whole frames


def test_video_only(tmp_path: Path) -> None:
    out = media.write_mp4(tmp_path / "v.mp4", frames(t=3), fps=16)
    assert media.decode_video(out).frames.shape[0] == 3
    with pytest.raises(MediaError, match="no audio stream"):
        media.decode_audio(out)


@pytest.mark.parametrize(
    ("video", "pcm", "expected"),
    [
        (frames().astype(np.float32), None, "frames must be uint8"),
        (frames(w=31), None, "is not even"),
        (frames(), np.full((2, 100), np.nan, np.float32), "200 non-finite samples"),
        (frames(), np.zeros((3, 100), np.float32), "1 or 2 channels"),
    ],
)
def test_bad_input_is_refused_naming_the_file_and_nothing_is_left(
    tmp_path: Path, video: np.ndarray, pcm: np.ndarray | None, expected: str
) -> None:
    with pytest.raises(MediaError) as err:
        media.write_mp4(tmp_path / "x.mp4", video, pcm, fps=8)
    assert str(tmp_path / "x.mp4") in str(err.value) and expected in str(err.value)
    assert list(tmp_path.iterdir()) == []
