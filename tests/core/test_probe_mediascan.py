"""The one-pass NaN/Inf count of a media output (``harness.probe.mediascan``) against decoding
the file whole (``harness.media``) on the files a target hands the probe: both give the same
count, or both refuse the file as broken. And an attempt's quality checks decode each output
file once."""

from __future__ import annotations

import wave
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from harness import media
from harness.errors import MediaError
from harness.probe.mediascan import AUDIO_SUFFIXES, IMAGE_SUFFIXES, media_nonfinite


def _decoded_whole(path: Path) -> int:
    """The count as the probe took it before: RGB frames and float PCM, NaN/Inf counted."""
    parts: list[Any] = []
    if path.suffix not in AUDIO_SUFFIXES:
        parts.append(media.decode_video(path).frames)
    if path.suffix not in IMAGE_SUFFIXES:
        try:
            parts.append(media.decode_audio(path).pcm)
        except MediaError:
            if not parts:
                raise
    return sum(int(p.size - np.isfinite(p).sum()) if p.dtype.kind == "f" else 0 for p in parts)


def _int_wav(path: Path, width: int, frames: int = 400) -> Path:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(2)
        w.setsampwidth(width)
        w.setframerate(8000)
        w.writeframes(np.random.default_rng(width).bytes(frames * 2 * width))
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("media")
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 255, (5, 16, 16, 3), dtype=np.uint8)
    pcm = np.sin(np.arange(3000, dtype=np.float32) / 9)[None, :]
    nan_pcm = pcm.copy()
    nan_pcm[0, [3, 70]] = [np.nan, np.inf]
    out = {
        "mp4 with aac": media.write_mp4(d / "av.mp4", frames, pcm[0], fps=8),
        "mp4 without audio": media.write_mp4(d / "v.mp4", frames, fps=8),
        "s16 wav": _int_wav(d / "s16.wav", 2),
        "u8 wav": _int_wav(d / "u8.wav", 1),
        "s24 wav": _int_wav(d / "s24.wav", 3),
        "float wav with nan and inf": d / "nan.wav",
        "png": d / "f.png",
    }
    media.write_wav(d / "nan.wav", nan_pcm, 8000)
    media.write_png(d / "f.png", frames[0])
    whole = (d / "av.mp4").read_bytes()
    for name, data in {
        "truncated mp4": whole[: len(whole) // 2],
        "truncated s16 wav": (d / "s16.wav").read_bytes()[:100],
        "empty wav": (d / "s16.wav").read_bytes()[:44],
        "not a wav": b"RIFF\x00\x00not a wav at all",
    }.items():
        path = d / (name.replace(" ", "_") + (".mp4" if "mp4" in name else ".wav"))
        path.write_bytes(data)
        out[name] = path
    return out


CASES = [
    "mp4 with aac",
    "mp4 without audio",
    "s16 wav",
    "u8 wav",
    "s24 wav",
    "float wav with nan and inf",
    "png",
    "truncated mp4",
    "truncated s16 wav",
    "empty wav",
    "not a wav",
]


@pytest.mark.parametrize("name", CASES)
def test_one_pass_counts_as_decoding_whole(files: dict[str, Path], name: str) -> None:
    path = files[name]
    try:
        want: int | str = _decoded_whole(path)
    except MediaError:
        want = "broken"
    try:
        got: int | str = media_nonfinite(path)
    except MediaError as exc:
        assert str(path) in str(exc)  # the message names the file
        if name == "truncated mp4":  # and FFmpeg's own words on what is wrong
            assert "moov atom not found" in str(exc)
        got = "broken"
    assert got == want
    if name == "float wav with nan and inf":
        assert got == 2  # a float stream is counted: the NaN-audio fault is still caught


def test_an_attempts_checks_decode_each_output_file_once(files: dict[str, Path]) -> None:
    from harness.checks import quality

    outputs = {"av": {"path": str(files["mp4 with aac"]), "kind": "video"}}
    decoded: dict[tuple[str, bool], Any] = {}
    ssim = quality._obtained("av", "ssim", outputs, {}, decoded)
    psnr = quality._obtained("av", "psnr", outputs, {}, decoded)
    assert psnr is ssim and not ssim.flags.writeable  # shared, so no check may change it
    pcm = quality._obtained("av", "audio_snr", outputs, {}, decoded)  # the same file's audio
    assert pcm.ndim == 2 and pcm.dtype == np.float32 and ssim.shape == (5, 16, 16, 3)
    assert len(decoded) == 2
