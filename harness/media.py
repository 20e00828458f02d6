"""Decoding and lossless writing of the media the harness compares, through PyAV only.

Every decoder failure (missing or empty file, a truncated MP4 without its index, a codec FFmpeg
cannot decode, a file without the stream asked for or without a single frame) is raised as
:class:`~harness.errors.MediaError` naming the file and the cause, so a broken output is a
recorded failure of one case and never a crash of the worker.

Example::

    video = decode_video("out.mp4")
    for i in select_frames(len(video.frames), "first-mid-last"):
        write_png(f"ref/frame_{i:04d}.png", video.frames[i])
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import av.logging
import numpy as np

from harness.cpuinfo import flags as cpu_flags
from harness.errors import MediaError

__all__ = [
    "AudioData",
    "FrameSpec",
    "VideoData",
    "decode_audio",
    "decode_video",
    "ffmpeg_version",
    "mp4_video_options",
    "muxed_packets",
    "read_png",
    "read_wav",
    "select_frames",
    "write_mp4",
    "write_png",
    "write_wav",
]

#: ``"first-mid-last"``, ``"all"`` or explicit frame indices (negative ones count from the end).
FrameSpec = str | Sequence[int]


@dataclass(frozen=True)
class VideoData:
    """A decoded video: ``frames`` is uint8 RGB of shape ``[T, H, W, 3]``."""

    frames: np.ndarray
    fps: float
    codec: str
    path: str


@dataclass(frozen=True)
class AudioData:
    """Decoded audio: ``pcm`` is float32 of shape ``[channels, samples]``, full scale +-1."""

    pcm: np.ndarray
    sample_rate: int
    codec: str
    path: str = ""


def ffmpeg_version() -> str:
    """The FFmpeg build PyAV carries, e.g. ``"8.1.2 (libavcodec 62.28.102)"``.

    Decoder output can change between FFmpeg builds, so the report records this next to every
    media comparison.
    """
    libs = getattr(av, "library_versions", {}) or {}
    codec = libs.get("libavcodec")
    base = str(getattr(av, "ffmpeg_version_info", "unknown"))
    if codec:
        return f"{base} (libavcodec {'.'.join(str(p) for p in codec)})"
    return base


@contextmanager
def _ffmpeg_errors() -> Iterator[None]:
    """Let FFmpeg's error lines reach PyAV's exceptions without printing them.

    PyAV silences FFmpeg's log by default, which also drops the real cause of a failed open
    ("moov atom not found") from the exception. With the level at ERROR, PyAV appends the last
    error line to the exception text; the capture keeps those lines off stderr. The previous
    level is restored on exit (the level is process-wide: decode from one thread at a time
    if the exact messages matter).
    """
    previous = av.logging.get_level()
    if previous is None or previous < av.logging.ERROR:
        av.logging.set_level(av.logging.ERROR)
    try:
        with av.logging.Capture(local=True):
            yield
    finally:
        av.logging.set_level(previous)


def _cause(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _check_file(path: Path, what: str) -> None:
    if not path.exists():
        raise MediaError(f"{path}: cannot decode {what}: file does not exist")
    if not path.is_file():
        raise MediaError(f"{path}: cannot decode {what}: not a regular file")
    if path.stat().st_size == 0:
        raise MediaError(f"{path}: cannot decode {what}: file is empty (0 bytes)")


def _first_stream(container: Any, kind: str, p: Path) -> Any:
    """The first ``kind`` stream that FFmpeg can decode, or a MediaError saying why not."""
    streams = container.streams.video if kind == "video" else container.streams.audio
    if not streams:
        kinds = sorted({str(s.type) for s in container.streams}) or ["none"]
        raise MediaError(
            f"{p}: cannot decode {kind}: no {kind} stream (streams: {', '.join(kinds)})"
        )
    stream = streams[0]
    if stream.codec_context is None:
        raise MediaError(
            f"{p}: cannot decode {kind}: unsupported codec (FFmpeg has no decoder for the first "
            f"{kind} stream's codec)"
        )
    return stream


def decode_video(path: str | os.PathLike[str], *, threads: bool = True) -> VideoData:
    """Decode every frame of the first video stream of ``path`` to uint8 RGB.

    ``threads=True`` lets FFmpeg pick frame or slice threading, which is several times faster
    on long clips and gives identical pixels.

    Raises :class:`MediaError` naming the file and the cause for anything undecodable.
    """
    p = Path(path)
    _check_file(p, "video")
    frames: list[np.ndarray] = []
    with _ffmpeg_errors():
        try:
            with av.open(str(p), mode="r") as container:
                stream = _first_stream(container, "video", p)
                if threads:
                    stream.thread_type = "AUTO"
                codec = stream.codec_context.name
                rate = stream.average_rate or stream.guessed_rate or stream.base_rate
                fps = float(rate) if rate else 0.0
                for frame in container.decode(stream):
                    frames.append(frame.to_ndarray(format="rgb24"))
        except MediaError:
            raise
        except Exception as exc:
            # Anything a broken file provokes (FFmpeg errors, but also PyAV tripping over a
            # half-parsed stream) is a failure of this file, not of the harness.
            raise MediaError(f"{p}: cannot decode video: {_cause(exc)}") from exc
    if not frames:
        raise MediaError(f"{p}: cannot decode video: the {codec} stream has zero frames")
    shapes = {f.shape for f in frames}
    if len(shapes) != 1:
        raise MediaError(
            f"{p}: cannot decode video: frame size changes mid-stream {sorted(shapes)}"
        )
    return VideoData(frames=np.stack(frames), fps=fps, codec=codec, path=str(p))


def decode_audio(path: str | os.PathLike[str]) -> AudioData:
    """Decode the first audio stream of ``path`` to float32 ``[channels, samples]``.

    Every sample format is converted to planar float at the stream's own rate and layout, so
    nothing is resampled in time.

    Raises :class:`MediaError` naming the file and the cause for anything undecodable.
    """
    p = Path(path)
    _check_file(p, "audio")
    chunks: list[np.ndarray] = []
    with _ffmpeg_errors():
        try:
            with av.open(str(p), mode="r") as container:
                stream = _first_stream(container, "audio", p)
                codec = stream.codec_context.name
                rate = int(stream.rate or stream.codec_context.sample_rate or 0)
                resampler: Any = None
                for frame in container.decode(stream):
                    if resampler is None:
                        # Created from the first frame: the stream header can lie about layout.
                        resampler = av.AudioResampler(
                            format="fltp", layout=frame.layout, rate=frame.sample_rate
                        )
                        rate = int(frame.sample_rate)
                    for out in resampler.resample(frame):
                        chunks.append(out.to_ndarray())
                if resampler is not None:
                    for out in resampler.resample(None):
                        chunks.append(out.to_ndarray())
        except MediaError:
            raise
        except Exception as exc:
            # Anything a broken file provokes (FFmpeg errors, but also PyAV tripping over a
            # half-parsed stream) is a failure of this file, not of the harness.
            raise MediaError(f"{p}: cannot decode audio: {_cause(exc)}") from exc
    if not chunks:
        raise MediaError(f"{p}: cannot decode audio: the {codec} stream has zero samples")
    pcm = np.ascontiguousarray(np.concatenate(chunks, axis=1), dtype=np.float32)
    return AudioData(pcm=pcm, sample_rate=rate, codec=codec, path=str(p))


def select_frames(n_frames: int, spec: FrameSpec) -> list[int]:
    """Indices of the frames a check compares, in ascending order without duplicates.

    ``"first-mid-last"`` is ``[0, n // 2, n - 1]`` (fewer for one or two frames), ``"all"`` is
    every frame, and a list of ints selects those frames (negative ones count from the end).

    >>> select_frames(124, "first-mid-last")
    [0, 62, 123]
    >>> select_frames(2, "first-mid-last")
    [0, 1]
    """
    if isinstance(n_frames, bool) or not isinstance(n_frames, int) or n_frames < 1:
        raise ValueError(f"n_frames must be a positive int, got {n_frames!r}")
    if isinstance(spec, str):
        if spec == "first-mid-last":
            return sorted({0, n_frames // 2, n_frames - 1})
        if spec == "all":
            return list(range(n_frames))
        raise ValueError(
            f"frames spec {spec!r} is not one of 'first-mid-last', 'all' or a list of ints"
        )
    indices: set[int] = set()
    for item in spec:
        if isinstance(item, bool) or not isinstance(item, int | np.integer):
            raise ValueError(f"frames spec entry {item!r} is {type(item).__name__}, expected int")
        i = int(item)
        if not -n_frames <= i < n_frames:
            raise ValueError(
                f"frames spec entry {i} is out of range for a video of {n_frames} frames "
                f"(valid: 0..{n_frames - 1}, or -{n_frames}..-1 from the end)"
            )
        indices.add(i % n_frames)
    if not indices:
        raise ValueError("frames spec is an empty list; name at least one frame")
    return sorted(indices)


_PNG_FORMATS = {1: "gray", 3: "rgb24", 4: "rgba"}


def write_png(path: str | os.PathLike[str], frame: np.ndarray) -> None:
    """Write a uint8 frame (``[H, W]``, ``[H, W, 1|3|4]``) as a lossless PNG.

    The PNG encoder is deterministic, so the same pixels give the same bytes.
    """
    arr = np.asarray(frame)
    if arr.dtype != np.uint8:
        raise ValueError(f"write_png: frame dtype is {arr.dtype}, expected uint8")
    if arr.ndim == 3 and arr.shape[2] == 1:
        arr = arr[:, :, 0]
    channels = 1 if arr.ndim == 2 else (arr.shape[2] if arr.ndim == 3 else 0)
    if channels not in _PNG_FORMATS:
        raise ValueError(f"write_png: frame shape is {arr.shape}, expected [H, W] or [H, W, 3|4]")
    fmt = _PNG_FORMATS[channels]
    ctx: Any = av.CodecContext.create("png", "w")
    ctx.width = arr.shape[1]
    ctx.height = arr.shape[0]
    ctx.pix_fmt = fmt
    ctx.time_base = Fraction(1, 1)
    frame_av = av.VideoFrame.from_ndarray(np.ascontiguousarray(arr), format=fmt)
    data = b"".join(bytes(pkt) for pkt in [*ctx.encode(frame_av), *ctx.encode(None)])
    Path(path).write_bytes(data)


def read_png(path: str | os.PathLike[str]) -> np.ndarray:
    """Read a PNG written by :func:`write_png` back to uint8 (``[H, W, 3]`` for RGB).

    Grayscale PNGs come back as ``[H, W]`` and RGBA ones as ``[H, W, 4]``.
    """
    p = Path(path)
    _check_file(p, "image")
    with _ffmpeg_errors():
        try:
            ctx: Any = av.CodecContext.create("png", "r")
            frames = [*ctx.decode(av.Packet(p.read_bytes())), *ctx.decode(None)]
        except Exception as exc:
            # Anything a broken file provokes (FFmpeg errors, but also PyAV tripping over a
            # half-parsed stream) is a failure of this file, not of the harness.
            raise MediaError(f"{p}: cannot decode image: {_cause(exc)}") from exc
    if not frames:
        raise MediaError(f"{p}: cannot decode image: not a PNG (no image decoded)")
    frame = frames[0]
    fmt = {"gray": "gray", "rgba": "rgba", "ya8": "rgba", "pal8": "rgb24"}.get(
        frame.format.name, "rgb24"
    )
    if frame.format.name in ("rgba64be", "rgba64le"):
        fmt = "rgba"
    return np.ascontiguousarray(frame.to_ndarray(format=fmt))


def write_wav(path: str | os.PathLike[str], pcm: np.ndarray, sample_rate: int) -> None:
    """Write float PCM ``[channels, samples]`` (or ``[samples]``) as 32-bit float WAV.

    Float WAV rather than 16-bit PCM or FLAC, so a decoded float32 track is stored bit-exactly.
    """
    arr = np.asarray(pcm, dtype=np.float32)
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[0] not in (1, 2) or arr.shape[1] == 0:
        raise ValueError(
            f"write_wav: pcm shape is {arr.shape}, expected [1 or 2 channels, samples > 0]"
        )
    if isinstance(sample_rate, bool) or not isinstance(sample_rate, int) or sample_rate <= 0:
        raise ValueError(f"write_wav: sample_rate is {sample_rate!r}, expected a positive int")
    layout = "mono" if arr.shape[0] == 1 else "stereo"
    with av.open(str(path), mode="w", format="wav") as container:
        stream: Any = container.add_stream("pcm_f32le", rate=sample_rate, layout=layout)
        stream.format = "flt"
        frame = av.AudioFrame.from_ndarray(
            # Packed float: samples interleaved along one row.
            np.ascontiguousarray(arr.T.reshape(1, -1)),
            format="flt",
            layout=layout,
        )
        frame.sample_rate = sample_rate
        frame.pts = 0
        for packet in stream.encode(frame):
            container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)


def read_wav(path: str | os.PathLike[str]) -> AudioData:
    """Read a WAV (any PCM or float format FFmpeg reads) as float32 ``[channels, samples]``."""
    return decode_audio(path)


# What write_mp4 muxed in this process: packets per stream of each file it wrote, by the file's
# (device, inode, size, mtime_ns, ctime_ns) when written; the newest 256 files. The file's
# identity is its inode, under any path or link to it: no path is resolved to look one up.
_MUXED: dict[tuple[int, int, int, int, int], tuple[int, ...]] = {}


def _stat_key(path: Path) -> tuple[int, int, int, int, int]:
    st = os.stat(path)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def muxed_packets(path: str | os.PathLike[str]) -> tuple[int, ...] | None:
    """The packets :func:`write_mp4` muxed into each stream of ``path``, in stream order, while
    the file is the one it wrote (same device and inode, size, modification and change time);
    None for any other file. What demuxing the file again would count, without opening it."""
    try:
        return _MUXED.get(_stat_key(Path(path)))
    except OSError:
        return None


#: libx264 settings of :func:`write_mp4`: one thread, fixed preset and CRF, no B-frames, so the
#: same frames give the same bytes on every run (with :func:`mp4_video_options`' one addition).
MP4_VIDEO_OPTIONS = {"crf": "20", "preset": "veryfast", "threads": "1", "bframes": "0"}


def mp4_video_options(cpuinfo: str = "/proc/cpuinfo") -> dict[str, str]:
    """:data:`MP4_VIDEO_OPTIONS` for this machine: on a CPU with AVX-512, libx264's assembly
    held to AVX2 (``x264-params asm=avx2``; every AVX-512 CPU has AVX2).

    libx264's AVX-512 code gave different bytes for the same frames from one process to the
    next: on an AMD EPYC runner (2026-12-04), six fresh processes that had imported torch wrote
    six different MP4s of one clip (the decoded frames up to 35 levels apart), and the same
    six with AVX2 wrote one. Elsewhere (no ``avx512f`` in ``cpuinfo``'s flags, or no
    ``cpuinfo``) the options are :data:`MP4_VIDEO_OPTIONS` unchanged.
    """
    options = dict(MP4_VIDEO_OPTIONS)
    if _has_avx512(cpuinfo):
        options["x264-params"] = "asm=avx2"
    return options


@functools.cache
def _has_avx512(cpuinfo: str) -> bool:
    return "avx512f" in (cpu_flags(cpuinfo) or ())


_AAC_FRAME = 1024


def write_mp4(
    path: str | os.PathLike[str],
    frames: np.ndarray,
    pcm: np.ndarray | None = None,
    *,
    fps: int,
    sample_rate: int = 16_000,
) -> Path:
    """Encode uint8 RGB ``frames [T, H, W, 3]`` as H.264 and optional float ``pcm``
    (``[samples]`` or ``[1 or 2 channels, samples]``) as AAC into one MP4, deterministically.

    The file appears under its name only when complete (written beside it, then replaced), so a
    failed encode never leaves a truncated MP4 behind. Odd frame sizes, non-finite samples and a
    wrong dtype are a :class:`MediaError` naming the file, before anything is written.
    """
    out = Path(path)
    if frames.dtype != np.uint8 or frames.ndim != 4 or frames.shape[-1] != 3 or not len(frames):
        raise MediaError(
            f"{out}: cannot encode video: frames must be uint8 [T>0, H, W, 3], got "
            f"{frames.dtype} {list(frames.shape)}"
        )
    if frames.shape[1] % 2 or frames.shape[2] % 2:
        raise MediaError(
            f"{out}: cannot encode video: {frames.shape[2]}x{frames.shape[1]} is not even "
            "(yuv420p needs even sizes)"
        )
    audio = None
    if pcm is not None:
        audio = np.asarray(pcm, dtype=np.float32)
        audio = audio[None, :] if audio.ndim == 1 else audio
        if audio.ndim != 2 or audio.shape[0] not in (1, 2) or not audio.shape[1]:
            raise MediaError(
                f"{out}: cannot encode audio: pcm shape {list(np.shape(pcm))}, expected "
                "[samples] or [1 or 2 channels, samples > 0]"
            )
        bad = int(audio.size - np.isfinite(audio).sum())
        if bad:
            raise MediaError(f"{out}: cannot encode audio: {bad} non-finite samples")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.stem}.partial-{os.getpid()}.mp4")
    packets = [0, 0] if pcm is not None else [0]

    def mux(container: Any, stream: int, encoded: Sequence[Any]) -> None:
        container.mux(encoded)
        packets[stream] += sum(1 for p in encoded if p.size)

    try:
        with _ffmpeg_errors(), av.open(str(tmp), "w", format="mp4") as container:
            vs: Any = container.add_stream("libx264", rate=fps, options=mp4_video_options())
            vs.width, vs.height = int(frames.shape[2]), int(frames.shape[1])
            vs.pix_fmt = "yuv420p"
            vs.codec_context.thread_count = 1
            vs.codec_context.time_base = Fraction(1, fps)
            layout = "mono" if audio is None or audio.shape[0] == 1 else "stereo"
            aus: Any = None
            if audio is not None:  # every stream exists before the first packet is muxed
                aus = container.add_stream("aac", rate=sample_rate, layout=layout)
                aus.codec_context.thread_count = 1
            for i, frame in enumerate(frames):
                vf = av.VideoFrame.from_ndarray(np.ascontiguousarray(frame), format="rgb24")
                vf.pts = i
                mux(container, 0, vs.encode(vf))
            mux(container, 0, vs.encode(None))
            if aus is not None and audio is not None:
                for start in range(0, audio.shape[1], _AAC_FRAME):
                    chunk = np.ascontiguousarray(audio[:, start : start + _AAC_FRAME])
                    af = av.AudioFrame.from_ndarray(chunk, format="fltp", layout=layout)
                    af.sample_rate = sample_rate
                    af.pts = start
                    mux(container, 1, aus.encode(af))
                mux(container, 1, aus.encode(None))
        os.replace(tmp, out)
        if len(_MUXED) >= 256:
            del _MUXED[next(iter(_MUXED))]
        _MUXED[_stat_key(out)] = tuple(packets)
    except Exception as exc:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise MediaError(f"{out}: cannot encode MP4: {_cause(exc)}") from exc
    return out
