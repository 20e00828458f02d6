"""The reference store: pinned, hash-verified reference outputs, read-only.

A store is a folder (the project's ``references/``) of lossless files plus ``manifest.json``::

    references/
      manifest.json
      t2va-int8/any/video/3f2a9c1d0e4b/frame_00000.png ...
      t2va-int8/mi300x/audio/77c1e0a9b2d4/audio.wav
      loader-bf16/any/logits/a0b1c2d3e4f5/tensor.safetensors

The manifest maps ``reference id -> platform class -> output name`` to one
:class:`ReferenceEntry`: the files with their SHA-256 (and frame index for frames), the case that
produced them, the producing environment, the harness version, the metric settings of the checks
that use it, and the bless provenance (why, by whom, when). Only :mod:`harness.bless` writes a
store; :class:`ReferenceStore` has no method that writes.

Every file is SHA-256-verified before use: a missing or modified file, or an output with no
manifest entry, raises :class:`~harness.errors.ReferenceStoreError` naming the file and the
expected and actual hashes. A lookup walks a platform fallback chain, so a platform can pin its
own references and fall back to ``any``::

    store = ReferenceStore(Path("references"))
    entry = store.lookup("t2va-int8", "video", platform_chain("hip", "mi300x"))
    frames = store.load_video(entry)  # uint8 [T, H, W, 3]
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness import media
from harness.errors import NoReferenceError, ReferenceStoreError
from harness.fsio import read_array
from harness.references.layout import misplaced
from harness.references.manifest import (
    FORMAT_VERSION,
    MANIFEST_NAME,
    BlessInfo,
    LayersEntry,
    Manifest,
    ReferenceEntry,
    ReferenceFile,
    file_sha256,
    harness_version,
    platform_chain,
    read_manifest,
)
from harness.references.verified import VERIFIED, FileKey, file_key, stat_key

__all__ = [
    "FORMAT_VERSION",
    "MANIFEST_NAME",
    "BlessInfo",
    "LayersEntry",
    "Manifest",
    "ReferenceEntry",
    "ReferenceFile",
    "ReferenceStore",
    "file_sha256",
    "harness_version",
    "platform_chain",
    "read_manifest",
]

_IGNORED_NAMES = frozenset({MANIFEST_NAME, "README.md", "README", ".gitkeep", ".gitattributes"})


class ReferenceStore:
    """Read-only view of a reference store; every file is hash-verified before it is used."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)
        self._manifest: Manifest | None = None
        self._root_resolved: Path | None = None
        self._folders: dict[str, tuple[str, bool]] = {}
        # What this store (one attempt's checks) already loaded: SSIM, PSNR and MAE of one
        # output read the same frames once, not once per check.
        self._loaded: dict[tuple[Any, ...], Any] = {}

    @property
    def manifest(self) -> Manifest:
        """The parsed manifest, read on first use (so a bad one fails the check that needs it)."""
        if self._manifest is None:
            self._manifest = _read_manifest(self.root)
        return self._manifest

    @property
    def entries(self) -> Mapping[tuple[str, str, str], ReferenceEntry]:
        return self.manifest.entries

    def get(self, reference_id: str, output: str, platform_class: str) -> ReferenceEntry | None:
        """The entry pinned for exactly this platform class, or None (no fallback)."""
        return self.manifest.entries.get((reference_id, platform_class, output))

    def layers_on(self, reference_id: str, platform_chain: Sequence[str]) -> LayersEntry | None:
        """The layered reference of the first platform class on ``platform_chain`` that pins
        one, or None (no error: a reference blessed before layered references has none)."""
        for plat in platform_chain:
            entry = self.manifest.layers.get((reference_id, plat))
            if entry is not None:
                return entry
        return None

    def load_layers(self, entry: LayersEntry) -> dict[str, np.ndarray]:
        """The layer samples of a layered reference (name -> float32 array), verified."""
        if entry.file is None:
            return {}
        return dict(self._read(entry.file, "layers", _read_layers))

    def lookup(
        self, reference_id: str, output: str, platform_chain: Sequence[str]
    ) -> ReferenceEntry:
        """The entry of the first platform class in ``platform_chain`` that pins this output."""
        for plat in platform_chain:
            entry = self.get(reference_id, output, plat)
            if entry is not None:
                return entry
        pinned = sorted({p for (r, p, o) in self.manifest.entries if r == reference_id})
        have = sorted({o for (r, _p, o) in self.manifest.entries if r == reference_id})
        if not pinned:
            detail = f"no reference '{reference_id}' in {self.root / MANIFEST_NAME}"
        else:
            detail = f"reference '{reference_id}' has outputs {have} for platform classes {pinned}"
        raise NoReferenceError(
            f"no reference for output '{output}' of '{reference_id}' on platform chain "
            f"{list(platform_chain)}: {detail}; bless one with "
            f"`harness refs bless --run <run dir> --case {reference_id}`"
        )

    # --- reading verified files -------------------------------------------------------------

    def verified_path(self, f: ReferenceFile) -> Path:
        """The path of ``f`` after checking it lies inside the store, exists and its SHA-256
        matches: a manifest can never make a check read a file from elsewhere. Always hashes
        (``harness refs verify``); checks read through :meth:`_read`, which hashes a file once
        per process per ``(path, size, mtime_ns)``."""
        self._verify(f, cached=False)
        return self.root / f.path

    def _verify(self, f: ReferenceFile, *, cached: bool) -> tuple[str, FileKey]:
        """The resolved path of ``f`` (a string: this runs for every frame of every check) and
        its :data:`FileKey`, once it is known to be inside the store and to match its hash."""
        resolved, st = self._resolve(f.path)
        if resolved is None:
            raise ReferenceStoreError(
                f"reference file {f.path!r} resolves to {(self.root / f.path).resolve()}, "
                f"outside the store {self._root()}; a manifest may only list files inside "
                "its store"
            )
        if st is None or not stat.S_ISREG(st.st_mode):
            raise ReferenceStoreError(
                f"reference file {self.root / f.path} is missing "
                f"(expected sha256 {f.sha256}, actual: none)"
            )
        key = stat_key(resolved, st)
        actual = VERIFIED.sha256(resolved, key) if cached else file_sha256(Path(resolved))
        if actual != f.sha256:
            raise ReferenceStoreError(
                f"reference file {self.root / f.path} does not match the manifest: "
                f"expected sha256 {f.sha256}, actual sha256 {actual}"
            )
        return resolved, key

    def _root(self) -> Path:
        if self._root_resolved is None:
            self._root_resolved = Path(_resolved_dir(str(self.root)))
        return self._root_resolved

    def _resolve(self, rel: str) -> tuple[str | None, os.stat_result | None]:
        """The resolved path of ``rel`` (None when that lies outside the store) and its
        ``stat`` (None when missing), in one ``lstat`` for a plain file: each folder is
        resolved, and checked to lie inside the store, once per store (an attempt), since the
        frames of one entry share a folder. A link, or a name like ``..``, is resolved and
        checked on its own."""
        folder_rel, name = os.path.split(rel)
        folder = self._folders.get(folder_rel)
        if folder is None:
            folder = self._folders[folder_rel] = _folder_inside(str(self._root()), folder_rel)
        parent_s, inside = folder
        candidate = os.path.join(parent_s, name)
        try:
            st: os.stat_result | None = os.lstat(candidate)
        except OSError:
            st = None  # missing: reported as missing by the caller
        if name in ("", ".", "..") or (st is not None and stat.S_ISLNK(st.st_mode)):
            real = Path(candidate).resolve()
            inside, candidate = real.is_relative_to(self._root()), str(real)
            try:
                st = os.stat(candidate)
            except OSError:
                st = None
        return (candidate if inside else None), st

    def _read(self, f: ReferenceFile, kind: str, decode: Callable[[Path], Any]) -> Any:
        """``decode`` of the verified file; hashed and decoded once per process while the file's
        ``(path, size, mtime_ns)`` stays the same (:mod:`harness.references.verified`). Arrays
        come back read-only so one check cannot change what the next one compares with."""
        resolved, key = self._verify(f, cached=True)
        return VERIFIED.decoded(resolved, key, kind, decode)

    def load_video(self, entry: ReferenceEntry, frames: Sequence[int] | None = None) -> np.ndarray:
        """Frames of a ``video`` entry as uint8 [T, H, W, 3] (an ``image`` entry: [H, W, 3]).

        ``frames`` loads (and verifies) only those frame indices, in that order, as
        [len(frames), H, W, 3]: a check on first-mid-last frames reads three PNGs, not all.
        """
        if entry.kind not in ("video", "image"):
            raise ReferenceStoreError(f"reference {entry.key} is {entry.kind}, not video")
        by_index = {f.frame or 0: f for f in entry.files}
        n = len(by_index)
        if n == 0 or n != len(entry.files) or sorted(by_index) != list(range(n)):
            raise ReferenceStoreError(
                f"reference {entry.key}: manifest frame indices {sorted(by_index)} are not "
                f"0..{n - 1}"
            )
        wanted = list(range(n)) if frames is None else [int(i) for i in frames]
        memo = ("video", entry.key, frames is None, tuple(wanted))
        if memo in self._loaded:
            return self._loaded[memo]
        missing = [i for i in wanted if i not in by_index]
        if missing:
            raise ReferenceStoreError(
                f"reference {entry.key} has {n} frames, no frame {missing[0]}"
            )
        frame_shape = tuple(entry.shape[1:] if entry.kind == "video" else entry.shape)
        arrays = []
        for i in wanted:
            a = np.asarray(self._read(by_index[i], "png", media.read_png))
            if a.shape != frame_shape or a.dtype != np.uint8:
                raise ReferenceStoreError(
                    f"reference file {self.root / by_index[i].path} decodes to {a.dtype} "
                    f"{list(a.shape)}, manifest says uint8 {list(frame_shape)}"
                )
            arrays.append(a)
        video = np.stack(arrays)
        video.flags.writeable = False  # shared by every check of this store
        result = video[0] if frames is None and entry.kind == "image" else video
        self._loaded[memo] = result
        return result

    def load_audio(self, entry: ReferenceEntry) -> tuple[np.ndarray, int]:
        """PCM of an ``audio`` entry as float32 (the shape it was blessed) and its sample rate."""
        if entry.kind != "audio":
            raise ReferenceStoreError(f"reference {entry.key} is {entry.kind}, not audio")
        (f,) = self._single(entry)
        audio = self._read(f, "wav", media.read_wav)
        pcm = np.asarray(audio.pcm, dtype=np.float32)
        if pcm.size != int(np.prod(entry.shape)):
            raise ReferenceStoreError(
                f"reference {entry.key}: {f.path} decodes to shape {list(pcm.shape)}, "
                f"manifest says {list(entry.shape)}"
            )
        return pcm.reshape(entry.shape), int(audio.sample_rate)

    def load_tensor(self, entry: ReferenceEntry) -> np.ndarray:
        """The array of a ``tensor`` entry (safetensors key ``data``)."""
        (f,) = self._single(entry)
        return np.asarray(self._read(f, "tensor", _read_tensor))

    def load(self, entry: ReferenceEntry) -> np.ndarray:
        """The reference array, whatever its kind (audio: PCM without the sample rate)."""
        if entry.kind in ("video", "image"):
            return self.load_video(entry)
        if entry.kind == "audio":
            return self.load_audio(entry)[0]
        return self.load_tensor(entry)

    def _single(self, entry: ReferenceEntry) -> tuple[ReferenceFile]:
        if len(entry.files) != 1:
            raise ReferenceStoreError(
                f"reference {entry.key} lists {len(entry.files)} files, expected 1"
            )
        return (entry.files[0],)

    # --- whole-store check ------------------------------------------------------------------

    def verify(self) -> list[str]:
        """Every problem of the store, one line each; an empty list means it is intact.

        Checks that each manifest file exists and matches its SHA-256, that it lies in its entry's
        own folder (:func:`~harness.references.layout.misplaced`), that no two entries claim one
        file, and reports files on disk that the manifest does not list.
        """
        if not self.root.is_dir():
            return [f"{self.root}: reference store folder does not exist"]
        try:
            manifest = self.manifest
        except ReferenceStoreError as exc:
            return [str(exc)]
        problems: list[str] = []
        listed: dict[str, str] = {}

        def check_files(
            key: str, files: Iterable[ReferenceFile], ref: str, plat: str, out: str | None
        ) -> None:
            """Each file claimed once, in its entry's own folder, matching its hash."""
            for f in files:
                if f.path in listed:
                    problems.append(f"{f.path}: listed by both {listed[f.path]} and {key}")
                listed[f.path] = key
                where = misplaced(ref, plat, out, f.path)
                if where is not None:
                    problems.append(f"{key}: {where}")
                try:
                    self.verified_path(f)
                except ReferenceStoreError as exc:
                    problems.append(f"{key}: {exc}")

        for (ref, plat, out), entry in manifest.entries.items():
            if (entry.reference_id, entry.platform_class, entry.output) != (ref, plat, out):
                problems.append(
                    f"{ref}/{plat}/{out}: manifest entry is filed under this key but names "
                    f"itself {entry.key}"
                )
            if not entry.files:
                problems.append(f"{entry.key}: manifest entry lists no files")
            check_files(entry.key, entry.files, ref, plat, out)
        for (ref, plat), lentry in manifest.layers.items():
            check_files(lentry.key, lentry.files, ref, plat, None)
        for path in _files_under(self.root):
            rel = path.relative_to(self.root).as_posix()
            if rel not in listed:
                problems.append(
                    f"{path}: file is not in the manifest "
                    f"(sha256 {file_sha256(path)}); remove it or bless it"
                )
        return problems


# Resolved store roots by the path they were resolved from, with the (device, inode) that path
# led to: every attempt opens a store, and resolving its root again took an lstat per component
# of the path; one stat now tells that the path still leads to the same folder, which is the
# store wherever it lies (a root that leads to another folder is resolved again).
_DIRS: dict[str, tuple[str, tuple[int, int]]] = {}


def _folder_inside(root: str, rel: str) -> tuple[str, bool]:
    """The resolved path of folder ``rel`` of the store whose resolved root is ``root``, and
    whether it lies inside the store. Without a link or a ``..`` among the components of
    ``rel`` it is ``root/rel`` (one lstat per component below the root, not a resolution of
    the whole path); otherwise it is resolved and checked."""
    parts = rel.split(os.sep) if rel else []
    if not any(part in ("", ".", "..") for part in parts):
        path = root
        for part in parts:
            path = os.path.join(path, part)
            try:
                if stat.S_ISLNK(os.lstat(path).st_mode):
                    break
            except OSError:  # missing (under the root: no ".."): its files are reported missing
                return os.path.join(root, rel), True
        else:
            return path, True
    real = Path(root, rel).resolve()
    return str(real), real.is_relative_to(root)


def _resolved_dir(path: str) -> str:
    """``os.path.realpath(path)`` of a folder, from :data:`_DIRS` while ``path`` still leads to
    the folder it resolved to (a path that does not exist is resolved as it is, uncached)."""
    try:
        st = os.stat(path)
    except OSError:
        return str(Path(path).resolve())
    ident = (st.st_dev, st.st_ino)
    hit = _DIRS.get(path)
    if hit is not None and hit[1] == ident:
        return hit[0]
    resolved = str(Path(path).resolve())
    if len(_DIRS) >= 4096:
        _DIRS.clear()
    _DIRS[path] = (resolved, ident)
    return resolved


# Parsed manifests by the manifest file's (path, size, mtime_ns): every attempt of a worker opens
# a store, and parsing the same JSON each time was a few ms per attempt. A rewritten manifest
# (bless) has a new key and is parsed again.
_MANIFESTS: dict[FileKey, Manifest] = {}


def _read_manifest(root: Path) -> Manifest:
    try:
        key = file_key(Path(_resolved_dir(str(root)), MANIFEST_NAME))
    except OSError:
        return read_manifest(root)  # missing or unreadable: its own message
    manifest = _MANIFESTS.get(key)
    if manifest is None:
        manifest = read_manifest(root)
        if len(_MANIFESTS) >= 64:
            _MANIFESTS.clear()
        _MANIFESTS[key] = manifest
    return manifest


def _read_tensor(path: Path) -> np.ndarray:
    try:
        return np.asarray(read_array(path))
    except ValueError as exc:
        raise ReferenceStoreError(f"reference file {path}: {exc}") from exc


def _read_layers(path: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    try:
        return {k: np.asarray(v) for k, v in load_file(str(path)).items()}
    except Exception as exc:  # safetensors raises its own error types
        raise ReferenceStoreError(f"reference file {path}: {exc}") from exc


def _files_under(root: Path) -> Iterable[Path]:
    if not root.is_dir():
        return []
    return sorted(
        p
        for p in root.rglob("*")
        if p.is_file()
        and p.name not in _IGNORED_NAMES
        and not any(part.startswith(".") for part in p.relative_to(root).parts)
    )
