"""The NaN/Inf count of a media output file, from one pass over its container.

An output file (an MP4 a server answered with, a WAV) is opened once and every packet of the
streams that count is decoded, so a stream that does not decode is still a broken output, but a
frame is converted to an array only when its format can hold a non-finite value: float PCM
(``flt``, ``fltp``, ``dbl``, ``dblp``: AAC, Opus and float WAV decode to these) and float
pixels (``grayf32le``, ``gbrpf32le``...). Integer PCM (``s16``, ``s32``, ``u8``) and integer
pixels (``yuv420p``, ``rgb24``...) cannot represent NaN or Inf, so their count is 0 without
looking at a sample: decoding H.264 to RGB and resampling a 16-bit WAV to float only to count
NaNs in them cost ~11 ms of a served request's ~14 ms of harness time (docs/benchmarks.md).

The rules are those of decoding the file whole (:func:`harness.media.decode_video` and
:func:`~harness.media.decode_audio`): a video or image file needs a decodable video stream with
at least one frame of one size; an audio file needs a decodable audio stream with samples; a
video file's audio stream is counted when it decodes and otherwise ignored, as before.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from harness.errors import MediaError

AUDIO_SUFFIXES = frozenset({".wav", ".flac", ".mp3", ".m4a", ".aac", ".ogg"})
IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg"})
_FLOAT_SAMPLES = frozenset({"flt", "fltp", "dbl", "dblp"})
_FEW_FRAMES = 32


def _float_pixels(name: str) -> bool:
    """Whether FFmpeg pixel format ``name`` stores floats (``grayf32le``, ``rgbaf16be``...)."""
    return "f32" in name or "f16" in name or "f64" in name


def _floats(frame: Any) -> list[Any]:
    """The values of a decoded frame of a float format, as flat numpy views of its planes
    (none for an integer one: no bit pattern of an integer sample or pixel is NaN or Inf)."""
    import numpy as np

    name = frame.format.name
    if name in _FLOAT_SAMPLES:
        dtype = np.float32 if name.startswith("flt") else np.float64
        if name.endswith("p"):  # planar: one plane per channel, padded past the samples
            return [np.frombuffer(p, dtype, count=frame.samples) for p in frame.planes]
        n = frame.samples * len(frame.layout.channels)
        return [np.frombuffer(frame.planes[0], dtype, count=n)]
    if _float_pixels(name):
        return [np.asarray(frame.to_ndarray()).ravel()]
    return []


def _nonfinite(chunks: list[Any]) -> int:
    """NaN/Inf values in ``chunks`` (flat float arrays), in one pass over them together."""
    import numpy as np

    if not chunks:
        return 0
    a = np.concatenate(chunks) if len(chunks) > 1 else chunks[0]
    if not a.size:
        return 0
    # NaN propagates through min and max and an Inf is one of them: finite extremes mean every
    # value is finite, without an isfinite pass.
    if math.isfinite(float(a.min())) and math.isfinite(float(a.max())):
        return 0
    return int(a.size - np.count_nonzero(np.isfinite(a)))


def _integer_wav(path: Path) -> bool:
    """Whether ``path`` is a complete integer-PCM WAV with samples (so 0 NaN/Inf, read without
    FFmpeg: the header and the data chunk's length are all there is to check, every byte
    pattern being a valid sample). The stdlib reader refuses float (format 3) and extensible
    WAVs, which FFmpeg then decodes and counts."""
    import wave

    try:
        with wave.open(str(path), "rb") as w:
            n = w.getnframes()
            want = n * w.getnchannels() * w.getsampwidth()
            return n > 0 and len(w.readframes(n)) == want
    except (wave.Error, EOFError, OSError, ValueError):
        return False


def media_nonfinite(path: Path) -> int:
    """NaN/Inf values in the decoded streams of media file ``path``; :class:`MediaError` naming
    the file and the cause when it does not decode (see the module doc for which streams)."""
    suffix = path.suffix.lower()
    if suffix == ".wav" and _integer_wav(path):
        return 0
    from harness import media

    media._check_file(path, "audio" if suffix in AUDIO_SUFFIXES else "video")
    try:
        # FFmpeg's log silent (PyAV's default): no Python callback for each of its messages
        return _scan(path)
    except MediaError:
        # A broken file: once more with FFmpeg's error lines captured into the message.
        with media._ffmpeg_errors():
            return _scan(path)


def _scan(path: Path) -> int:
    import av

    from harness import media

    suffix = path.suffix.lower()
    want_video = suffix not in AUDIO_SUFFIXES
    what = "video" if want_video else "audio"
    try:
        with av.open(str(path), mode="r") as container:
            video = media._first_stream(container, "video", path) if want_video else None
            audio: Any = None
            if suffix not in IMAGE_SUFFIXES:
                try:
                    audio = media._first_stream(container, "audio", path)
                except MediaError:
                    if video is None:
                        raise
            if video is not None and not 0 < video.frames <= _FEW_FRAMES:
                # Threads give identical frames, faster on long clips; starting them costs
                # more than a short clip's decode (~0.6 ms of 3 ms for 8 frames at 32x32).
                video.thread_type = "AUTO"
            frames, samples = 0, 0
            sizes: set[tuple[int, int]] = set()
            pixels: list[Any] = []
            pcm: list[Any] = []
            audio_broken = False
            for packet in container.demux(*(s for s in (video, audio) if s is not None)):
                if packet.stream is audio:
                    if audio_broken:
                        continue
                    try:
                        decoded = packet.decode()
                    except Exception:
                        if video is None:
                            raise
                        audio_broken = True  # a video's audio is counted only if it decodes
                        continue
                    for f in decoded:
                        samples += f.samples
                        pcm += _floats(f)
                    continue
                for f in packet.decode():
                    frames += 1
                    sizes.add((f.width, f.height))
                    pixels += _floats(f)
            count = _nonfinite(pixels) + (0 if audio_broken else _nonfinite(pcm))
    except MediaError:
        raise
    except Exception as exc:
        # Anything a broken file provokes (FFmpeg errors, PyAV tripping over a half-parsed
        # stream) is a failure of this file, not of the harness.
        raise MediaError(f"{path}: cannot decode {what}: {media._cause(exc)}") from exc
    if video is not None and not frames:
        codec = video.codec_context.name
        raise MediaError(f"{path}: cannot decode video: the {codec} stream has zero frames")
    if len(sizes) > 1:
        raise MediaError(
            f"{path}: cannot decode video: frame size changes mid-stream {sorted(sizes)}"
        )
    if video is None and not samples:
        codec = audio.codec_context.name
        raise MediaError(f"{path}: cannot decode audio: the {codec} stream has zero samples")
    return count


__all__ = ["AUDIO_SUFFIXES", "IMAGE_SUFFIXES", "media_nonfinite"]
