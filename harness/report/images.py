"""The pictures of the HTML report: outputs and references decoded with the harness's own
readers (safetensors through :mod:`harness.fsio`, MP4 through PyAV in :mod:`harness.media`,
references through the hash-verifying :class:`~harness.references.ReferenceStore`), written as
PNGs into the report's ``images/`` folder: each frame at full size, a thumbnail when the frame is
large, and a heat map of the absolute difference between two frames, scaled to that pair's
largest difference (a 1/255 drift is as visible as a large one; the caption states the scale).

Anything that cannot be decoded is a :class:`ImageError` with the file and the cause, which the
report shows in place of the picture; it never stops the rendering.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness import media
from harness.errors import HarnessError
from harness.fsio import read_array, write_atomic
from harness.references.store import ReferenceStore
from harness.report.shown import VIDEO_SUFFIXES

THUMB_PX = 192  # longest side of a thumbnail; smaller frames are their own thumbnail
# Heat-map colours (black -> purple -> orange -> yellow -> white) at evenly spaced stops; the
# page's colour bar (.heatbar in report.css) is the same gradient.
STOPS = np.array(
    [[0, 0, 0], [87, 16, 110], [188, 55, 84], [249, 142, 9], [252, 255, 164]], dtype=np.float64
)


class ImageError(Exception):
    """An output or reference the report cannot show, with the file and the cause."""


@dataclass(frozen=True)
class Picture:
    """One written image: ``src`` the full-size file and ``thumb`` the one shown, both
    relative to the report's folder."""

    src: str
    thumb: str
    width: int
    height: int


def output_path(base: Path, info: Mapping[str, Any]) -> Path:
    """The file of an attempt's output; its path is relative to the folder of its report."""
    raw = info.get("path")
    if not raw:
        raise ImageError(f"output has no file ({info.get('kind', 'unknown')} kept in memory)")
    path = Path(str(raw))
    return path if path.is_absolute() else base / path


def load_frames(base: Path, info: Mapping[str, Any]) -> np.ndarray:
    """An output's frames as uint8 ``[T, H, W, 3]`` (an image output as one frame)."""
    path = output_path(base, info)
    try:
        if path.suffix == ".safetensors":
            frames = np.asarray(read_array(path))
        elif path.suffix.lower() in VIDEO_SUFFIXES:
            frames = media.decode_video(path).frames
        elif path.suffix.lower() == ".png":
            frames = media.read_png(path)
        else:
            raise ImageError(f"{path}: not a format the report decodes")
    except (ValueError, OSError, HarnessError) as exc:
        raise ImageError(str(exc)) from exc
    if frames.ndim == 3:
        frames = frames[None]
    if frames.dtype != np.uint8 or frames.ndim != 4 or frames.shape[-1] not in (1, 3, 4):
        raise ImageError(
            f"{path}: {frames.dtype} {list(frames.shape)} is not uint8 frames [T, H, W, 3]"
        )
    return frames


def load_audio(base: Path, info: Mapping[str, Any]) -> tuple[np.ndarray, int]:
    """An output's PCM (float) and its sample rate (from the output's metadata)."""
    path = output_path(base, info)
    try:
        if path.suffix == ".safetensors":
            pcm = np.asarray(read_array(path), dtype=np.float32)
            rate = int((info.get("meta") or {}).get("sample_rate") or 0)
            return pcm, rate
        audio = media.decode_audio(path)
    except (ValueError, OSError, HarnessError) as exc:
        raise ImageError(str(exc)) from exc
    return audio.pcm, audio.sample_rate


def _entry(store: ReferenceStore, key: str) -> Any:
    """``reference/platform-class/output`` (a check's ``settings.reference``) -> its entry."""
    try:
        ref, plat, output = key.rsplit("/", 2)
        entry = store.get(ref, output, plat)
    except ValueError as exc:
        raise ImageError(f"reference {key!r} is not reference/platform/output") from exc
    except HarnessError as exc:
        raise ImageError(str(exc)) from exc
    if entry is None:
        raise ImageError(f"reference {key} is not in {store.root}")
    return entry


def reference_frames(store: ReferenceStore, key: str, frames: Sequence[int]) -> np.ndarray:
    """The reference's ``frames`` (hash-verified) as uint8 ``[len(frames), H, W, 3]``."""
    try:
        return store.load_video(_entry(store, key), list(frames))
    except HarnessError as exc:
        raise ImageError(str(exc)) from exc


def reference_audio(store: ReferenceStore, key: str) -> tuple[np.ndarray, int]:
    try:
        return store.load_audio(_entry(store, key))
    except HarnessError as exc:
        raise ImageError(str(exc)) from exc


@dataclass(frozen=True)
class Heat:
    """The difference of two frames: ``rgb`` coloured from black (equal) to the top of the scale
    at ``max``, or None where the frames are identical; ``max`` and ``mean`` on 0-255."""

    rgb: np.ndarray | None
    max: float
    mean: float

    @property
    def scale(self) -> str:
        """What the colour bar spans, in 0-1 units and in 1/255 steps: ``0 .. 0.0039 (1/255)``."""
        if self.max == 0:
            return "identical"
        return f"0 .. {self.max / 255:.2g} ({self.max:g}/255)"


def heat(a: np.ndarray, b: np.ndarray) -> Heat:
    """The absolute difference of two uint8 frames (the largest over the channels), coloured on
    a scale from 0 to the pair's own largest difference, so a difference of 1/255 is drawn at
    full scale instead of as a black square; identical frames have no picture."""
    if a.shape != b.shape:
        raise ImageError(f"frames differ in shape: {list(a.shape)} vs {list(b.shape)}")
    diff = np.abs(a.astype(np.int16) - b.astype(np.int16))
    if diff.ndim == 3:
        diff = diff.max(axis=2)
    mx, mean = float(diff.max()), float(diff.mean())
    if mx == 0:
        return Heat(None, 0.0, 0.0)
    t = diff * ((len(STOPS) - 1) / mx)
    i = np.minimum(t.astype(int), len(STOPS) - 2)
    frac = (t - i)[..., None]
    rgb = STOPS[i] * (1 - frac) + STOPS[i + 1] * frac
    return Heat(rgb.round().astype(np.uint8), mx, mean)


def _thumbnail(frame: np.ndarray) -> np.ndarray:
    """``frame`` shrunk by an integer factor (box filter) to fit :data:`THUMB_PX`."""
    h, w = frame.shape[:2]
    k = -(-max(h, w) // THUMB_PX)
    hh, ww = h // k * k, w // k * k
    f = frame[:hh, :ww].astype(np.float64)
    shape = (hh // k, k, ww // k, k, *frame.shape[2:])
    return f.reshape(shape).mean(axis=(1, 3)).round().astype(np.uint8)


class ImageFolder:
    """Writes the PNGs of one report into ``<report dir>/images/``."""

    def __init__(self, report_dir: Path, folder: str = "images") -> None:
        self.root = report_dir
        self.folder = folder
        self.written: list[Path] = []

    def write(self, key: str, frame: np.ndarray) -> Picture:
        """``frame`` as ``images/<key>.png`` (and a ``.thumb.png`` when it is large)."""
        d = self.root / self.folder
        d.mkdir(parents=True, exist_ok=True)
        # Readable and unique: the key's safe characters, then a hash of the whole key.
        readable = re.sub(r"[^A-Za-z0-9.-]+", "_", key).strip("._")[:60]
        name = f"{readable}-{hashlib.sha256(key.encode()).hexdigest()[:10]}"
        arr = np.ascontiguousarray(frame)
        h, w = arr.shape[:2]
        full = d / f"{name}.png"
        write_atomic(full, lambda t: media.write_png(t, arr))
        self.written.append(full)
        thumb = full
        if max(h, w) > THUMB_PX:
            thumb = d / f"{name}.thumb.png"
            small = _thumbnail(arr)
            write_atomic(thumb, lambda t: media.write_png(t, small))
            self.written.append(thumb)
        rel = f"{self.folder}/{full.name}"
        return Picture(rel, f"{self.folder}/{thumb.name}", w, h)
