"""Bless's writing half: an output's files into its entry's folder, the manifest, and the
removal of what a replaced entry alone listed. Called only by :mod:`harness.references.bless`,
after every refusal rule has passed; see :mod:`harness.references.layout` for where files go.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness import media
from harness.fsio import write_array, write_atomic, write_text_atomic
from harness.model import CaseResult, RunReport
from harness.references.layout import ensure_inside, entry_folder, is_inside
from harness.references.manifest import (
    MANIFEST_NAME,
    BlessInfo,
    LayersEntry,
    Manifest,
    ReferenceEntry,
    ReferenceFile,
    file_sha256,
    harness_version,
)
from harness.references.rules import output_meta

__all__ = ["Prepared", "remove_replaced", "write_entry", "write_manifest"]


@dataclass(frozen=True)
class Prepared:
    """An output that passed every refusal rule, ready to write."""

    output: str
    kind: str
    array: np.ndarray
    info: Mapping[str, Any]
    drift: Mapping[str, Any]
    replaces: ReferenceEntry | None
    settings: Mapping[str, Any]


def _png(path: Path, frame: np.ndarray) -> None:
    media.write_png(path, frame)


def _content_id(a: np.ndarray, extra: str) -> str:
    h = hashlib.sha256(f"{a.dtype}{list(a.shape)}{extra}".encode())
    h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:12]


def write_entry(
    root: Path,
    result: CaseResult,
    p: Prepared,
    platform_class: str,
    info: BlessInfo,
    report: RunReport,
) -> ReferenceEntry:
    """Write one output's files into a fresh content-addressed folder of its entry; the entry
    that lists them (not yet in the manifest)."""
    meta = output_meta(p.info)
    rate = meta.get("sample_rate") if p.kind == "audio" else None
    fps = meta.get("fps") if p.kind == "video" else None
    rel = entry_folder(result.reference or result.id, platform_class, p.output)
    folder = ensure_inside(root, root / rel / _content_id(p.array, f"{p.kind}{rate}"))
    folder.mkdir(parents=True, exist_ok=True)
    files: list[ReferenceFile] = []

    def add(path: Path, frame: int | None = None) -> None:
        ensure_inside(root, path)
        files.append(ReferenceFile(path.relative_to(root).as_posix(), file_sha256(path), frame))

    if p.kind in ("video", "image"):
        frames = p.array if p.kind == "video" else p.array[None]
        for i, frame in enumerate(frames):
            path = ensure_inside(root, folder / f"frame_{i:05d}.png")
            write_atomic(path, functools.partial(_png, frame=frame))
            add(path, i)
    elif p.kind == "audio":
        path = ensure_inside(root, folder / "audio.wav")
        pcm = p.array.astype(np.float32, copy=False)
        write_atomic(path, lambda t: media.write_wav(t, pcm, int(rate or 0)))
        add(path)
    else:
        path = ensure_inside(root, folder / "tensor.safetensors")
        write_array(path, p.array)
        add(path)
    env = dict(report.env)
    env.setdefault("runner", report.runner)
    return ReferenceEntry(
        reference_id=result.reference or result.id,
        platform_class=platform_class,
        output=p.output,
        kind=p.kind,
        case_id=result.id,
        files=tuple(files),
        shape=tuple(int(x) for x in p.array.shape),
        dtype=str(p.array.dtype),
        blessed=info,
        environment=env,
        harness_version=harness_version(),
        metric_settings=p.settings,
        fps=float(fps) if isinstance(fps, int | float) else None,
        sample_rate=int(rate) if isinstance(rate, int) else None,
        source_hash=str(p.info.get("hash", "")),
        platform=result.platform,
    )


def write_manifest(root: Path, manifest: Manifest) -> None:
    """Replace the store's manifest atomically."""
    write_text_atomic(ensure_inside(root, root / MANIFEST_NAME), manifest.dumps())


def remove_replaced(
    root: Path,
    replaced: Sequence[ReferenceEntry | LayersEntry],
    entries: Iterable[ReferenceEntry | LayersEntry],
) -> None:
    """Delete the files of replaced entries that no entry of the new manifest lists.

    Only files the replaced entry itself listed, only inside the store, never a whole folder:
    a file another entry still lists (two ids that once shared a folder) is kept, and so is any
    unlisted file, which ``verify`` then reports.
    """
    listed = {f.path for e in entries for f in e.files}
    for old in replaced:
        for f in old.files:
            path = root / f.path
            if f.path in listed or not is_inside(root, path) or not path.is_file():
                continue
            path.unlink()
            _prune_empty(path.parent, root)


def _prune_empty(folder: Path, root: Path) -> None:
    top = root.resolve()
    while (
        folder.resolve() != top
        and is_inside(root, folder)
        and folder.is_dir()
        and not any(folder.iterdir())
    ):
        folder.rmdir()
        folder = folder.parent
