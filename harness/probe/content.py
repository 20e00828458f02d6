"""Content of what a target hands the probe: hashes of decoded content, fingerprints, and
NaN/Inf counts of output files. Import-light like the probe: numpy, torch, safetensors and PyAV
are imported inside the functions that need them (torch only if the target already did).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import math
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from harness.fsio import read_tensors
from harness.probe.mediascan import AUDIO_SUFFIXES, IMAGE_SUFFIXES, media_nonfinite

_AUDIO_SUFFIXES = AUDIO_SUFFIXES
_IMAGE_SUFFIXES = IMAGE_SUFFIXES
_MEDIA_SUFFIXES = _AUDIO_SUFFIXES | _IMAGE_SUFFIXES | {".mp4", ".mkv", ".mov", ".webm", ".avi"}
# Every file kind whose content the probe decodes (and so can count NaN/Inf in).
_DECODABLE = frozenset({*_MEDIA_SUFFIXES, ".safetensors", ".npy", ".npz"})


@functools.cache
def _hash_kind() -> tuple[Callable[[], Any], str]:
    """The content hasher and its prefix: blake3, or SHA-256 where it is missing."""
    try:
        import blake3

        return blake3.blake3, "blake3:"
    except ImportError:  # pragma: no cover - blake3 is a declared dependency
        return hashlib.sha256, "sha256:"


def _hasher() -> Any:
    return _hash_kind()[0]()


def _hash_prefix() -> str:
    return _hash_kind()[1]


def _torch_tensor(x: Any) -> Any:
    """``x`` if it is a torch tensor (torch already imported by the target), else None."""
    torch = sys.modules.get("torch")
    return x if torch is not None and isinstance(x, torch.Tensor) else None


def _as_numpy(x: Any) -> Any:
    """A numpy view of a tensor or array; torch dtypes numpy lacks are widened to float32."""
    import numpy as np

    t = _torch_tensor(x)
    if t is not None:
        t = t.detach().cpu()
        if t.is_floating_point() and t.element_size() < 4:  # bfloat16, float16, float8 kinds
            t = t.to(sys.modules["torch"].float32)
        return t.contiguous().numpy()
    return np.asarray(x)


def _raw_bytes(x: Any) -> tuple[Any, str, tuple[int, ...]]:
    """A zero-copy uint8 view of a tensor's or array's bytes (bf16/fp8 kept bit-exact), its
    dtype name and shape."""
    import numpy as np

    t = _torch_tensor(x)
    if t is not None:
        t = t.detach().cpu().contiguous()
        raw = t.reshape(-1).view(sys.modules["torch"].uint8).numpy()
        return raw, str(t.dtype).removeprefix("torch."), tuple(t.shape)
    a = np.ascontiguousarray(np.asarray(x))
    return a.reshape(-1).view(np.uint8), str(a.dtype), tuple(a.shape)


def _where(x: Any) -> dict[str, str]:
    """Where a tensor lived (``cpu``, ``cuda:0``, ``npu:0``...) and whose array it is; a numpy
    array (or anything else made into one) is ``cpu``."""
    t = _torch_tensor(x)
    if t is not None:
        return {"device": str(t.device), "framework": "torch"}
    return {"device": "cpu", "framework": "numpy"}


def content_hash(x: Any) -> str:
    """Hash of a tensor's or array's content, dtype and shape (not of any file it came from)."""
    return _hash_raw(*_raw_bytes(x))


def _hash_raw(raw: Any, dtype: str, shape: tuple[int, ...]) -> str:
    h = _hasher()
    h.update(f"{dtype}{list(shape)}".encode())
    h.update(memoryview(raw))
    return _hash_prefix() + h.hexdigest()


def _nonfinite(a: Any) -> int:
    """How many NaN/Inf values a numpy array holds (0 for integer and other kinds)."""
    import numpy as np

    if a.dtype.kind not in "fc" or not a.size:
        return 0
    return int(a.size - np.count_nonzero(np.isfinite(a)))


def _describe(x: Any) -> tuple[dict[str, Any], Any]:
    """The fingerprint of ``x`` and the numpy array it was computed on (for reuse)."""
    import numpy as np

    # One C-ordered copy of a strided array (frames permuted by a pipeline, say) serves the
    # hash, the safetensors file and every check, instead of each copying it on its own.
    a = np.ascontiguousarray(_as_numpy(x))
    lo = hi = mean = None
    nonfinite = 0
    if a.size and a.dtype.kind in "biuf":
        # The ufuncs' own reductions: what ndarray.min/max/mean call, without their wrappers.
        lo, hi = float(np.minimum.reduce(a, axis=None)), float(np.maximum.reduce(a, axis=None))
        # NaN propagates through min and max and an Inf is one of them: finite extremes mean
        # every value is finite, and the array needs no isfinite pass.
        if a.dtype.kind == "f" and not (math.isfinite(lo) and math.isfinite(hi)):
            nonfinite = _nonfinite(a)
            vals = a[np.isfinite(a)]
            lo = hi = None
            if vals.size:
                lo, hi = float(vals.min()), float(vals.max())
                mean = float(vals.mean(dtype=np.float64))
        else:
            mean = float(np.add.reduce(a, axis=None, dtype=np.float64) / a.size)
    else:
        nonfinite = _nonfinite(a)
    t = _torch_tensor(x)
    if t is not None and t.element_size() != a.itemsize:
        raw, dtype, shape = _raw_bytes(x)  # bf16/fp8 hashed as their own bits, not widened
    else:
        # ``a`` holds the tensor's own bytes (the numpy view of its contiguous CPU copy).
        dtype = str(t.dtype).removeprefix("torch.") if t is not None else str(a.dtype)
        raw, shape = a.reshape(-1).view(np.uint8), tuple(a.shape)
    info = {
        "hash": _hash_raw(raw, dtype, shape),
        "dtype": dtype,
        "shape": list(shape),
        "nonfinite": nonfinite,
        "min": lo,
        "max": hi,
        "mean": mean,
        **_where(x),
    }
    return info, a


#: Tensors and arrays up to this size are copied when fingerprinted and described later
#: (:func:`hold`); a larger one is described at the call, where its own size dominates.
HOLD_BYTES = 1 << 20


class Held(NamedTuple):
    """A private copy of a small tensor or array (:func:`hold`), and the ``torch.device`` the
    original lived on (None for numpy), to describe or hash once the target has returned."""

    copy: Any
    device: Any

    def describe(self) -> dict[str, Any]:
        """:func:`describe` of the copy, with the device the original lived on."""
        info = _describe(self.copy)[0]
        if self.device is not None:
            info["device"] = str(self.device)
        return info

    def content_hash(self) -> str:
        """:func:`content_hash` of the copy (the original's: same bytes, dtype and shape)."""
        return content_hash(self.copy)


def hold(x: Any) -> Held | None:
    """A :class:`Held` copy of a small tensor or array to describe later; None for anything
    else, or anything larger than :data:`HOLD_BYTES` (then described at the call).

    Why: a fingerprint taken between a pipeline's kernels runs with the harness's code and
    data evicted from the caches, ~0.3 ms for a 3 KB tensor against ~0.07 ms in a batch of
    them after the target returns. Copying it costs a few microseconds, and the copy is what
    the tensor held at the call: the pipeline may change the original in place afterwards.
    """
    t = _torch_tensor(x)
    if t is not None:
        if t.layout is not sys.modules["torch"].strided:
            return None
        if t.numel() * t.element_size() > HOLD_BYTES:
            return None
        t = t.detach()
        # A device tensor's .cpu() is its copy (and synchronizes, as describing it would).
        return Held(t.clone() if t.device.type == "cpu" else t.cpu(), t.device)
    np = sys.modules.get("numpy")
    if np is None or not isinstance(x, np.ndarray) or x.dtype.kind not in "biufc":
        return None
    return Held(x.copy(), None) if x.nbytes <= HOLD_BYTES else None


def describe(x: Any) -> dict[str, Any]:
    """Fingerprint of a tensor or array: hash, dtype, shape, non-finite count, min, max, mean,
    and where it lived (``device``, ``framework``)."""
    return _describe(x)[0]


def _decode_media(path: Path) -> list[Any]:
    """Decoded RGB frames and/or PCM of a media file (whichever streams it has)."""
    from harness import media
    from harness.errors import MediaError

    parts: list[Any] = []
    if path.suffix.lower() not in _AUDIO_SUFFIXES:
        parts.append(media.decode_video(path).frames)
    if path.suffix.lower() not in _IMAGE_SUFFIXES:
        try:
            parts.append(media.decode_audio(path).pcm)
        except MediaError:
            if not parts:
                raise
    return parts


def _is_pathlike(x: Any) -> bool:
    # A Path is always a file; a str is one only if such a file exists (else it is text data).
    return isinstance(x, os.PathLike) or (isinstance(x, str) and os.path.isfile(x))


def _file_hash(path: Path) -> str:
    h = _hasher()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return _hash_prefix() + h.hexdigest()


def copy_hashed(src: Path, dst: Path | None) -> tuple[str, int]:
    """Copy ``src`` to ``dst``, hashing the bytes as they pass: ``(hash, size)`` of what was
    written (one read of the file, not a copy and then a second read to hash it). ``dst``
    None (or ``src`` itself) hashes ``src`` where it lies."""
    h = _hasher()
    size = 0
    with contextlib.ExitStack() as files:
        fin = files.enter_context(src.open("rb"))
        fout = files.enter_context(dst.open("wb")) if dst is not None and dst != src else None
        for chunk in iter(lambda: fin.read(1 << 20), b""):
            h.update(chunk)
            if fout is not None:
                fout.write(chunk)
            size += len(chunk)
    return _hash_prefix() + h.hexdigest(), size


def hash_input(data: Any) -> str:
    """Hash of the decoded content of an input: pixels and samples, tensors, or bytes.

    Media files are decoded (two encodes of the same frames hash alike only if they decode
    alike, which is what matters); safetensors files hash their tensors by name.
    """
    if isinstance(data, bytes | bytearray):
        h = _hasher()
        h.update(bytes(data))
        return _hash_prefix() + h.hexdigest()
    if _is_pathlike(data):
        path = Path(data)
        suffix = path.suffix.lower()
        if suffix in _MEDIA_SUFFIXES:
            h = _hasher()
            for part in _decode_media(path):
                h.update(content_hash(part).encode())
            return _hash_prefix() + h.hexdigest()
        if suffix == ".safetensors":
            # Tensors by name, not file bytes: bf16/fp8 are read bit-exactly and widened (a
            # header or metadata rewrite that changes no tensor changes no input hash).
            try:
                tensors = read_tensors(path)
            except ValueError:  # not a safetensors file after all: its exact bytes
                return _file_hash(path)
            h = _hasher()
            for key in sorted(tensors):
                h.update(key.encode())
                h.update(content_hash(tensors[key]).encode())
            return _hash_prefix() + h.hexdigest()
        return _file_hash(path)
    if isinstance(data, str):
        return hash_input(data.encode())
    return content_hash(data)


def _file_nonfinite(path: Path) -> tuple[int | None, str | None]:
    """NaN/Inf count of a file's decoded content, or ``(None, why)`` when it cannot be decoded.

    Media (audio PCM, video and image pixels), every tensor of a ``.safetensors`` file (bf16 and
    fp8 included), ``.npy`` and every array of an ``.npz`` (never unpickled).
    """
    suffix = path.suffix.lower()
    try:
        if suffix in _MEDIA_SUFFIXES:
            # One pass over the container; integer PCM and pixels are decoded, never converted
            # (they cannot hold NaN/Inf): see harness.probe.mediascan.
            return media_nonfinite(path), None
        if suffix == ".safetensors":
            parts = list(read_tensors(path).values())
        elif suffix in (".npy", ".npz"):
            import numpy as np

            loaded = np.load(path, allow_pickle=False)
            if isinstance(loaded, np.ndarray):
                parts = [loaded]
            else:
                with loaded:
                    parts = [loaded[k] for k in loaded.files]
        else:
            known = ", ".join(sorted(_DECODABLE))
            return None, f"{path.name}: the harness has no decoder for '{suffix}' files ({known})"
    except Exception as exc:  # a broken file is this output's problem, recorded, never a pass
        msg = str(exc)
        return None, msg if str(path) in msg else f"{path}: {type(exc).__name__}: {msg}"
    return sum(_nonfinite(part) for part in parts), None


def muxed_by_harness(path: Path) -> tuple[int, ...] | None:
    """Packets per stream, if ``harness.media.write_mp4`` wrote ``path`` in this process and it
    is unchanged since (``harness.media.muxed_packets``); None otherwise, or if that module was
    never imported (then nothing here was written by it)."""
    media = sys.modules.get("harness.media")
    return None if media is None else media.muxed_packets(path)


def sources_nonfinite(
    path: Path,
    sources: Sequence[str],
    outputs: Mapping[str, Mapping[str, Any]],
    packets: Sequence[int] | None = None,
) -> tuple[int | None, str | None, list[str]] | None:
    """NaN/Inf count of a media file from the arrays it was encoded from, or None to decode it.

    ``sources`` name outputs already recorded from arrays in this attempt (``probe.output`` of
    the frames, of the PCM). Their counts are what the file's decoded content would hold at
    most: an MP4's frames are 8-bit and cannot hold NaN/Inf, and its encoder refuses
    non-finite samples, so the arrays are the honest place to look. The file itself is still
    opened and demuxed (a few ms, no decoding): one that does not is broken, ``(None, why,
    sources)``. ``packets`` (:func:`muxed_by_harness`) are the packets per stream the
    harness's own muxer wrote into an unchanged file: they stand for what the demux would
    count. None when any source is not such an output (the file is decoded instead).
    """
    if path.suffix.lower() not in _MEDIA_SUFFIXES or not sources:
        return None
    counts = [outputs.get(s, {}).get("nonfinite") for s in sources]
    if any(not isinstance(outputs.get(s, {}).get("dtype"), str) for s in sources) or any(
        not isinstance(c, int) for c in counts
    ):
        return None
    if packets is None:
        why = _demux_problem(path)
    else:  # the harness's own muxer counted the packets of each stream as it wrote them
        empty = [i for i, n in enumerate(packets) if not n]
        why = f"{path}: streams {empty} hold no packets" if empty else None
    if why is not None:
        return None, why, list(sources)
    return sum(int(c) for c in counts if c is not None), None, list(sources)


# FFmpeg's demuxer for a suffix, so that opening skips probing the format (~0.1 ms of the
# demux of a tiny MP4); a file that does not open so is opened again with probing.
_DEMUXERS = {".mp4": "mp4", ".mov": "mov", ".m4a": "mp4", ".mkv": "matroska", ".webm": "webm"}


def _demux_problem(path: Path) -> str | None:
    """Why ``path`` does not open as a media container with packets in every stream, or None."""
    hint = _DEMUXERS.get(path.suffix.lower())
    why = _demux(path, hint)
    return why if why is None or hint is None else _demux(path, None)


def _demux(path: Path, demuxer: str | None) -> str | None:
    import av

    try:
        with av.open(str(path), mode="r", format=demuxer) as container:
            if not container.streams:
                return f"{path}: the container has no streams"
            seen = {p.stream.index for p in container.demux() if p.size}
            empty = [s.index for s in container.streams if s.index not in seen]
    except Exception as exc:  # a broken file is this output's problem, recorded
        return f"{path}: cannot demux: {type(exc).__name__}: {exc}"
    if empty:
        return f"{path}: streams {empty} hold no packets"
    return None
