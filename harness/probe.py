"""What a target calls to tell the harness what happened inside an attempt.

Import-light on purpose: importing this module imports nothing beyond the standard library, so
instrumented production code pays nothing for it. Outside an attempt every function is a cheap
no-op (``seed()`` and ``platform()`` return ``None``).

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

_MEDIA_SUFFIXES = {
    ".mp4",
    ".mkv",
    ".mov",
    ".webm",
    ".avi",
    ".wav",
    ".flac",
    ".mp3",
    ".m4a",
    ".aac",
    ".ogg",
    ".png",
    ".jpg",
    ".jpeg",
}


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


def _as_numpy(x: Any) -> Any:
    """A numpy view of a tensor or array; torch dtypes numpy lacks are widened to float32."""
    import numpy as np

    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        t = x.detach().cpu()
        if t.dtype in (torch.bfloat16, torch.float16) or "float8" in str(t.dtype):
            t = t.to(torch.float32)
        return t.contiguous().numpy()
    return np.asarray(x)


def _raw_bytes(x: Any) -> tuple[Any, str, tuple[int, ...]]:
    """A zero-copy uint8 view of a tensor's or array's bytes (bf16/fp8 kept bit-exact), its
    dtype name and shape."""
    import numpy as np

    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        t = x.detach().cpu().contiguous()
        raw = t.reshape(-1).view(torch.uint8).numpy()
        return raw, str(t.dtype).removeprefix("torch."), tuple(t.shape)
    a = np.ascontiguousarray(np.asarray(x))
    return a.reshape(-1).view(np.uint8), str(a.dtype), tuple(a.shape)


def content_hash(x: Any) -> str:
    """Hash of a tensor's or array's content, dtype and shape (not of any file it came from)."""
    raw, dtype, shape = _raw_bytes(x)
    h = _hasher()
    h.update(f"{dtype}{list(shape)}".encode())
    h.update(memoryview(raw))
    return _hash_prefix() + h.hexdigest()


def _describe(x: Any) -> tuple[dict[str, Any], Any]:
    """The fingerprint of ``x`` and the numpy array it was computed on (for reuse)."""
    import numpy as np

    a = _as_numpy(x)
    nonfinite = 0
    lo = hi = mean = None
    if a.size:
        if a.dtype.kind in "fc":
            finite = np.isfinite(a)
            nonfinite = int(a.size - int(finite.sum()))
            vals = a[finite] if nonfinite else a
        else:
            vals = a
        if vals.size and a.dtype.kind in "biuf":
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
    }
    return info, a


def describe(x: Any) -> dict[str, Any]:
    """Fingerprint of a tensor or array: hash, dtype, shape, non-finite count, min, max, mean."""
    return _describe(x)[0]


def _decode_media(path: Path) -> list[Any]:
    """Decoded RGB frames and/or PCM of a media file (whichever streams it has)."""
    from harness import media
    from harness.errors import MediaError

    parts: list[Any] = []
    if path.suffix.lower() not in {".wav", ".flac", ".mp3", ".m4a", ".aac", ".ogg"}:
        parts.append(media.decode_video(path).frames)
    if path.suffix.lower() not in {".png", ".jpg", ".jpeg"}:
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


def _safe_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def output(name: str, array_or_path: Any, **meta: Any) -> None:
    """Record an output: an array (saved as safetensors) or a file (copied into the run).

    ``meta`` describes it for the checks: ``kind`` (``video``, ``audio``, ``image``,
    ``tensor``, ``file``), ``fps``, ``sample_rate``.
    """
    if _current is None:
        return
    rec = _current
    clean_meta = {k: v for k, v in meta.items() if isinstance(v, str | int | float | bool)}
    if _is_pathlike(array_or_path):
        src = Path(array_or_path)
        entry: dict[str, Any] = {
            "kind": str(meta.get("kind", "file")),
            "hash": _file_hash(src),
            "bytes": src.stat().st_size,
            "nonfinite": 0,
            "meta": clean_meta,
        }
        if rec.output_dir is not None:
            rec.output_dir.mkdir(parents=True, exist_ok=True)
            dst = rec.output_dir / f"{_safe_name(name)}{src.suffix}"
            shutil.copyfile(src, dst)
            entry["path"] = str(dst)
        else:
            entry["path"] = str(src)
        rec.outputs[name] = entry
        return
    info, array = _describe(array_or_path)
    entry = {
        "kind": str(meta.get("kind", "tensor")),
        "hash": info["hash"],
        "dtype": info["dtype"],
        "shape": info["shape"],
        "nonfinite": info["nonfinite"],
        "min": info["min"],
        "max": info["max"],
        "meta": clean_meta,
    }
    rec.output_arrays[name] = array
    if rec.output_dir is not None:
        from safetensors.numpy import save_file

        rec.output_dir.mkdir(parents=True, exist_ok=True)
        dst = rec.output_dir / f"{_safe_name(name)}.safetensors"
        tmp = dst.with_suffix(".safetensors.tmp")
        save_file(
            {"data": array.copy() if not array.flags.c_contiguous else array},
            str(tmp),
            metadata={k: str(v) for k, v in clean_meta.items()},
        )
        os.replace(tmp, dst)
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
