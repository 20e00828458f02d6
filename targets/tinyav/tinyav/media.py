"""Media I/O with PyAV: deterministic MP4 export, WAV writing, reference decoding.

Determinism matters more than quality here: libx264 runs single-threaded with a fixed preset
and CRF (and AVX2 at most: ``harness.media.mp4_video_options``), so the same frames give the
same bytes on every run. A file only ever appears under its final name complete (written to a
temporary sibling, then ``os.replace``d), so a crash or an encoder error never leaves a
truncated MP4 (missing ``moov``) behind under that name.
"""

from __future__ import annotations

import contextlib
import os
import wave
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

from harness.media import mp4_video_options
from tinyav.errors import ExportError

AAC_FRAME = 1024


def _check_frames(frames: np.ndarray) -> None:
    if frames.dtype != np.uint8 or frames.ndim != 4 or frames.shape[-1] != 3:
        raise ExportError(
            f"frames must be uint8 [T,H,W,3], got {frames.dtype} {list(frames.shape)}"
        )
    if frames.shape[1] % 2 or frames.shape[2] % 2:
        raise ExportError(
            f"frame size {frames.shape[2]}x{frames.shape[1]} must be even for yuv420p"
        )


def _check_pcm(pcm: np.ndarray) -> None:
    if pcm.dtype != np.float32 or pcm.ndim != 1:
        raise ExportError(f"audio must be float32 [N], got {pcm.dtype} {list(pcm.shape)}")
    bad = int(np.size(pcm) - np.isfinite(pcm).sum())
    if bad:
        # AAC would fail mid-stream and leave an MP4 without a moov atom; refuse up front.
        raise ExportError(f"audio contains {bad} non-finite samples; refusing to encode")


def write_mp4(
    path: str | os.PathLike[str],
    frames: np.ndarray,
    pcm: np.ndarray | None = None,
    *,
    fps: int = 8,
    sample_rate: int = 16_000,
) -> Path:
    """Encode ``frames`` (uint8 [T,H,W,3]) and optional mono ``pcm`` (float32) as H.264 + AAC."""
    _check_frames(frames)
    if pcm is not None:
        _check_pcm(pcm)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.stem}.partial-{os.getpid()}.mp4")
    try:
        with av.open(str(tmp), "w", format="mp4") as container:
            # the harness's settings: one thread, fixed preset and CRF, no B-frames, and
            # libx264 held to AVX2 on an AVX-512 CPU, whose code gave other bytes each process
            vs = container.add_stream("libx264", rate=fps, options=mp4_video_options())
            vs.width, vs.height = frames.shape[2], frames.shape[1]
            vs.pix_fmt = "yuv420p"
            vs.codec_context.thread_count = 1
            vs.codec_context.time_base = Fraction(1, fps)
            streams_audio = None
            if pcm is not None:
                streams_audio = container.add_stream("aac", rate=sample_rate, layout="mono")
                streams_audio.codec_context.thread_count = 1
            for i, frame in enumerate(frames):
                vf = av.VideoFrame.from_ndarray(np.ascontiguousarray(frame), format="rgb24")
                vf.pts = i
                container.mux(vs.encode(vf))
            container.mux(vs.encode(None))
            if streams_audio is not None and pcm is not None:
                for start in range(0, len(pcm), AAC_FRAME):
                    chunk = np.ascontiguousarray(pcm[start : start + AAC_FRAME])[None, :]
                    af = av.AudioFrame.from_ndarray(chunk, format="fltp", layout="mono")
                    af.sample_rate = sample_rate
                    af.pts = start
                    container.mux(streams_audio.encode(af))
                container.mux(streams_audio.encode(None))
        os.replace(tmp, out)
    except Exception as e:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        if isinstance(e, ExportError):
            raise
        raise ExportError(f"encoding {out} failed: {e}") from e
    return out


def write_wav(path: str | os.PathLike[str], pcm: np.ndarray, sample_rate: int = 16_000) -> Path:
    """Write mono float PCM in [-1, 1] as 16-bit WAV (atomically)."""
    _check_pcm(pcm)
    out = Path(path)
    tmp = out.with_name(f".{out.name}.partial")
    data = (np.clip(pcm, -1.0, 1.0) * 32767.0).round().astype("<i2")
    with wave.open(str(tmp), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(sample_rate)
        w.writeframes(data.tobytes())
    os.replace(tmp, out)
    return out


def decode_video(
    path: str | os.PathLike[str], width: int | None = None, height: int | None = None
) -> np.ndarray:
    """All frames of the first video stream as uint8 RGB [T,H,W,3] (optionally rescaled)."""
    frames = []
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        stream.thread_type = "NONE"
        stream.codec_context.thread_count = 1
        for frame in container.decode(stream):
            frames.append(frame.to_ndarray(format="rgb24", width=width, height=height))
    if not frames:
        raise ExportError(f"{path}: no video frames")
    return np.stack(frames)


def decode_audio(path: str | os.PathLike[str], sample_rate: int = 16_000) -> np.ndarray:
    """The first audio stream as mono float32 PCM [N] at ``sample_rate``."""
    chunks = []
    resampler = av.AudioResampler(format="flt", layout="mono", rate=sample_rate)
    with av.open(str(path)) as container:
        stream = container.streams.audio[0]
        for frame in container.decode(stream):
            for out in resampler.resample(frame):
                chunks.append(out.to_ndarray().reshape(-1))
        for out in resampler.resample(None):
            chunks.append(out.to_ndarray().reshape(-1))
    if not chunks:
        raise ExportError(f"{path}: no audio samples")
    return np.concatenate(chunks).astype(np.float32)


def synthetic_reference(
    seed: int,
    frames: int = 16,
    height: int = 64,
    width: int = 64,
    fps: int = 8,
    sample_rate: int = 16_000,
) -> tuple[np.ndarray, np.ndarray]:
    """A seeded moving-gradient clip and a two-tone chirp of matching duration."""
    rng = np.random.default_rng(seed)
    fx, fy, speed = rng.uniform(0.5, 3.0, size=3)
    colour = rng.uniform(0.2, 1.0, size=3)
    t = np.arange(frames)[:, None, None]
    y = np.arange(height)[None, :, None] / height
    x = np.arange(width)[None, None, :] / width
    base = 0.5 + 0.5 * np.sin(2 * np.pi * (fx * x + fy * y) + speed * t)
    video = (base[..., None] * colour * 255).round().clip(0, 255).astype(np.uint8)
    n = round(frames / fps * sample_rate)
    ts = np.arange(n) / sample_rate
    f0 = rng.uniform(200.0, 600.0)
    audio = 0.3 * np.sin(2 * np.pi * f0 * ts * (1 + 0.5 * ts)) + 0.1 * np.sin(
        2 * np.pi * 3 * f0 * ts
    )
    return video, audio.astype(np.float32)
