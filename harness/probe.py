"""What a target calls to tell the harness what happened inside an attempt.

Import-light on purpose: importing this module imports nothing beyond the standard library
(and :mod:`harness.fsio`, which is standard library only), so instrumented production code pays
nothing for it; numpy, PyAV and safetensors are imported only when a call needs them, and torch
never (a tensor passed in means the target has imported it already). Outside an attempt every
function is a cheap no-op (``seed()`` and ``platform()`` return ``None``).

Example, inside a target::

    from harness import probe

    def t2v(steps: int = 4) -> None:
        with probe.stage("DenoisingStage"):
            latents = denoise(noise(probe.seed() or 0), steps)
        probe.fingerprint("latents", latents)
        probe.output("video", decode(latents), kind="video", fps=8)
        probe.note("dispatch.int8_mm", "dequant_matmul")
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.fsio import read_tensors, slug, write_array

__all__ = [
    "active",
    "fingerprint",
    "note",
    "output",
    "platform",
    "record_input",
    "seed",
    "stage",
]

_AUDIO_SUFFIXES = frozenset({".wav", ".flac", ".mp3", ".m4a", ".aac", ".ogg"})
_IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg"})
_MEDIA_SUFFIXES = _AUDIO_SUFFIXES | _IMAGE_SUFFIXES | {".mp4", ".mkv", ".mov", ".webm", ".avi"}


@dataclass
class _Recorder:
    """Everything one attempt records; owned by the worker, filled by the probe calls."""

    seed: int | None
    platform: str | None
    output_dir: Path | None
    stages: dict[str, float] = field(default_factory=dict)
    fingerprints: dict[str, dict[str, Any]] = field(default_factory=dict)
    inputs: dict[str, str] = field(default_factory=dict)
    outputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    notes: dict[str, Any] = field(default_factory=dict)
    # Output arrays kept in memory so checks in the same worker need not re-read the files.
    output_arrays: dict[str, Any] = field(default_factory=dict)


_current: _Recorder | None = None


def _begin(seed: int | None, platform: str | None, output_dir: Path | None) -> _Recorder:
    """Start recording an attempt (called by the worker only)."""
    global _current
    _current = _Recorder(seed=seed, platform=platform, output_dir=output_dir)
    return _current


def _end() -> _Recorder | None:
    """Stop recording and hand back what was recorded (called by the worker only)."""
    global _current
    rec, _current = _current, None
    return rec


def active() -> bool:
    """True inside an attempt run by the harness."""
    return _current is not None


def seed() -> int | None:
    """The attempt's seed (Python's ``random``, numpy and torch are already seeded with it)."""
    return _current.seed if _current is not None else None


def platform() -> str | None:
    """The platform the attempt runs on (``cpu``, ``cuda``, ``hip``, ...), or None outside one."""
    return _current.platform if _current is not None else None


def note(name: str, value: Any) -> None:
    """Record a small JSON value, such as which dispatch path ran; checks can assert on it."""
    if _current is None:
        return
    if not isinstance(value, str | int | float | bool) and value is not None:
        value = str(value)
    _current.notes[name] = value


def _synchronize() -> None:
    # Only synchronize a device the target already initialized: never import torch ourselves.
    torch = sys.modules.get("torch")
    if torch is None:
        return
    with contextlib.suppress(Exception):
        if torch.cuda.is_initialized():
            torch.cuda.synchronize()


@contextlib.contextmanager
def stage(name: str) -> Iterator[None]:
    """Time a named stage (device-synchronized when a device is active); stages keep their order.

    A stage entered twice accumulates its time, so a loop body can be one stage.
    """
    if _current is None:
        yield
        return
    rec = _current
    # Claim the slot on entry so stages are listed in the order they started, outer first.
    rec.stages.setdefault(name, 0.0)
    _synchronize()
    start = time.perf_counter()
    try:
        yield
    finally:
        _synchronize()
        rec.stages[name] += time.perf_counter() - start


# --- content hashing -----------------------------------------------------------------------


def _hasher() -> Any:
    try:
        import blake3

        return blake3.blake3()
    except ImportError:  # pragma: no cover - blake3 is a declared dependency
        return hashlib.sha256()


def _hash_prefix() -> str:
    try:
        import blake3  # noqa: F401

        return "blake3:"
    except ImportError:  # pragma: no cover
        return "sha256:"


def _torch_tensor(x: Any) -> Any:
    """``x`` if it is a torch tensor (torch already imported by the target), else None."""
    torch = sys.modules.get("torch")
    return x if torch is not None and isinstance(x, torch.Tensor) else None


def _as_numpy(x: Any) -> Any:
    """A numpy view of a tensor or array; torch dtypes numpy lacks are widened to float32."""
    import numpy as np

    t = _torch_tensor(x)
    if t is not None:
        torch = sys.modules["torch"]
        t = t.detach().cpu()
        if t.dtype in (torch.bfloat16, torch.float16) or "float8" in str(t.dtype):
            t = t.to(torch.float32)
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
    raw, dtype, shape = _raw_bytes(x)
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

    a = _as_numpy(x)
    nonfinite = _nonfinite(a)
    lo = hi = mean = None
    if a.size and a.dtype.kind in "biuf":
        vals = a[np.isfinite(a)] if nonfinite else a
        if vals.size:
            lo, hi = float(vals.min()), float(vals.max())
            mean = float(vals.mean(dtype=np.float64))
    _, dtype, shape = _raw_bytes(x)
    info = {
        "hash": content_hash(x),
        "dtype": dtype,
        "shape": list(shape),
        "nonfinite": nonfinite,
        "min": lo,
        "max": hi,
        "mean": mean,
        **_where(x),
    }
    return info, a


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
            from safetensors.numpy import load_file

            try:
                tensors = load_file(str(path))
                h = _hasher()
                for key in sorted(tensors):
                    h.update(key.encode())
                    h.update(content_hash(tensors[key]).encode())
                return _hash_prefix() + h.hexdigest()
            except Exception:  # numpy lacks bf16/fp8: fall back to the exact file bytes
                return _file_hash(path)
        return _file_hash(path)
    if isinstance(data, str):
        return hash_input(data.encode())
    return content_hash(data)


def fingerprint(name: str, tensor_or_array: Any) -> None:
    """Record a fingerprint of an intermediate tensor; order of calls is kept."""
    if _current is None:
        return
    _current.fingerprints[name] = describe(tensor_or_array)


def record_input(name: str, data_or_path: Any) -> None:
    """Record the hash of an input's decoded content (a media path is decoded first).

    ``data_or_path`` is an array or tensor, bytes, a ``Path`` (or a ``str`` naming an existing
    file), or any other ``str``, which is hashed as text (a prompt, say).
    """
    if _current is None:
        return
    _current.inputs[name] = hash_input(data_or_path)


def _file_nonfinite(path: Path) -> tuple[int | None, str | None]:
    """NaN/Inf count of a file's decoded content, or ``(None, why)`` when it cannot be decoded.

    Media (audio PCM, video and image pixels), every tensor of a ``.safetensors`` file (bf16 and
    fp8 included), ``.npy`` and every array of an ``.npz`` (never unpickled).
    """
    suffix = path.suffix.lower()
    try:
        if suffix in _MEDIA_SUFFIXES:
            parts = _decode_media(path)
        elif suffix == ".safetensors":
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


_DECODABLE = frozenset({*_MEDIA_SUFFIXES, ".safetensors", ".npy", ".npz"})


def _claim(rec: _Recorder, name: str, suffix: str) -> Path | None:
    """Reserve ``name`` in this attempt and pick its file in the output folder.

    One name, one output: a second ``output(name, ...)`` would overwrite the first (and lose
    a NaN recorded in between), so it is an error. File names are ``slug(name) + suffix``,
    injective because ``slug`` is and a suffix holds exactly one dot.
    """
    if name in rec.outputs:
        raise ValueError(
            f"probe.output: output '{name}' was already recorded in this attempt; "
            "give every output its own name"
        )
    if rec.output_dir is None:
        return None
    rec.output_dir.mkdir(parents=True, exist_ok=True)
    return rec.output_dir / f"{slug(name)}{suffix}"


def output(name: str, array_or_path: Any, **meta: Any) -> None:
    """Record an output: an array (saved as safetensors) or a file (copied into the run).

    Either way its content is decoded and counted for NaN/Inf, which the always-on
    ``finite(name)`` check turns into a verdict; a file the harness cannot decode records
    ``nonfinite: None`` and why, and that check reports *not run*. Each name may be used once
    per attempt. ``meta`` describes the output for the checks: ``kind`` (``video``,
    ``audio``, ``image``, ``tensor``, ``file``), ``fps``, ``sample_rate``.
    """
    if _current is None:
        return
    rec = _current
    clean_meta = {k: v for k, v in meta.items() if isinstance(v, str | int | float | bool)}
    if isinstance(array_or_path, str) and not os.path.isfile(array_or_path):
        raise FileNotFoundError(f"probe.output('{name}', ...): no such file: {array_or_path}")
    if _is_pathlike(array_or_path):
        src = Path(array_or_path)
        # Suffix-less files get ".bin", so every file name keeps exactly one dotted suffix.
        dst = _claim(rec, name, src.suffix or ".bin")
        if dst is not None:
            shutil.copyfile(src, dst)
        stored = dst or src
        nonfinite, why = _file_nonfinite(stored)
        entry: dict[str, Any] = {
            "kind": str(meta.get("kind", "file")),
            "hash": _file_hash(stored),
            "bytes": stored.stat().st_size,
            "nonfinite": nonfinite,
            "meta": clean_meta,
            "path": str(stored),
        }
        if why is not None:
            entry["nonfinite_reason"] = why
            # A format the harness decodes that does not decode is a broken output (a failure);
            # a format it has no decoder for holds no numbers it could judge (not run).
            entry["corrupt"] = src.suffix.lower() in _DECODABLE
        rec.outputs[name] = entry
        return
    dst = _claim(rec, name, ".safetensors")
    info, array = _describe(array_or_path)
    entry = {
        "kind": str(meta.get("kind", "tensor")),
        **{k: info[k] for k in ("hash", "dtype", "shape", "nonfinite", "min", "max")},
        "device": info["device"],
        "framework": info["framework"],
        "meta": clean_meta,
    }
    rec.output_arrays[name] = array
    if dst is not None:
        write_array(dst, array, metadata={k: str(v) for k, v in clean_meta.items()})
        entry["path"] = str(dst)
    rec.outputs[name] = entry


def snapshot(rec: _Recorder) -> Mapping[str, Any]:
    """The JSON-ready part of a recorder (arrays left out)."""
    return {
        "stages": dict(rec.stages),
        "fingerprints": dict(rec.fingerprints),
        "inputs": dict(rec.inputs),
        "outputs": dict(rec.outputs),
        "notes": dict(rec.notes),
    }
