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

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from harness.errors import ReferenceStoreError

__all__ = [
    "FORMAT_VERSION",
    "MANIFEST_NAME",
    "BlessInfo",
    "Manifest",
    "ReferenceEntry",
    "ReferenceFile",
    "ReferenceStore",
    "file_sha256",
    "harness_version",
    "platform_chain",
    "read_manifest",
]

FORMAT_VERSION = 1
MANIFEST_NAME = "manifest.json"
ANY = "any"
# Files in the store folder that are documentation, not references.
_IGNORED_NAMES = frozenset({MANIFEST_NAME, "README.md", "README", ".gitkeep", ".gitattributes"})


def platform_chain(platform: str, runner_class: str | None = None) -> list[str]:
    """Fallback order for reference lookup: runner class, then platform, then ``any``.

    >>> platform_chain("hip", "mi300x")
    ['mi300x', 'hip', 'any']
    >>> platform_chain("cpu", None)
    ['cpu', 'any']
    """
    chain: list[str] = []
    for p in (runner_class, platform, ANY):
        if p and p not in chain:
            chain.append(p)
    return chain


def harness_version() -> str:
    """The installed harness version, or ``0+unknown`` when running from a plain checkout."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("harness")
    except PackageNotFoundError:
        return "0+unknown"


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of a file's bytes."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@dataclass(frozen=True)
class ReferenceFile:
    """One file of an entry: path relative to the store root, its SHA-256, its frame index."""

    path: str
    sha256: str
    frame: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "sha256": self.sha256, "frame": self.frame}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ReferenceFile:
        return cls(path=str(d["path"]), sha256=str(d["sha256"]), frame=d.get("frame"))


@dataclass(frozen=True)
class BlessInfo:
    """Bless provenance: why, by whom, when (UTC ISO), from which run, and whether forced."""

    reason: str
    who: str
    when: str
    run_id: str = ""
    source: str = ""  # the run folder it was blessed from
    forced: bool = False
    drift: Mapping[str, Any] = field(default_factory=dict)  # vs the entry it replaced, if any

    def to_json(self) -> dict[str, Any]:
        return {
            "reason": self.reason,
            "who": self.who,
            "when": self.when,
            "run_id": self.run_id,
            "source": self.source,
            "forced": self.forced,
            "drift": dict(self.drift),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> BlessInfo:
        return cls(
            reason=str(d.get("reason", "")),
            who=str(d.get("who", "")),
            when=str(d.get("when", "")),
            run_id=str(d.get("run_id", "")),
            source=str(d.get("source", "")),
            forced=bool(d.get("forced", False)),
            drift=dict(d.get("drift", {})),
        )


@dataclass(frozen=True)
class ReferenceEntry:
    """One pinned output: ``kind`` is ``video``, ``image``, ``audio`` or ``tensor``."""

    reference_id: str
    platform_class: str
    output: str
    kind: str
    case_id: str
    files: tuple[ReferenceFile, ...]
    shape: tuple[int, ...]
    dtype: str
    blessed: BlessInfo
    environment: Mapping[str, Any] = field(default_factory=dict)
    harness_version: str = "0+unknown"
    metric_settings: Mapping[str, Any] = field(default_factory=dict)
    fps: float | None = None
    sample_rate: int | None = None
    source_hash: str = ""  # the run's content hash of the output (probe's blake3/sha256)

    @property
    def key(self) -> str:
        """``<reference id>/<platform class>/<output>``, for messages."""
        return f"{self.reference_id}/{self.platform_class}/{self.output}"

    def to_json(self) -> dict[str, Any]:
        return {
            "reference_id": self.reference_id,
            "platform_class": self.platform_class,
            "output": self.output,
            "kind": self.kind,
            "case_id": self.case_id,
            "shape": list(self.shape),
            "dtype": self.dtype,
            "fps": self.fps,
            "sample_rate": self.sample_rate,
            "source_hash": self.source_hash,
            "files": [f.to_json() for f in self.files],
            "environment": dict(self.environment),
            "harness_version": self.harness_version,
            "metric_settings": dict(self.metric_settings),
            "blessed": self.blessed.to_json(),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ReferenceEntry:
        return cls(
            reference_id=str(d["reference_id"]),
            platform_class=str(d["platform_class"]),
            output=str(d["output"]),
            kind=str(d["kind"]),
            case_id=str(d.get("case_id", d["reference_id"])),
            files=tuple(ReferenceFile.from_json(f) for f in d.get("files", [])),
            shape=tuple(int(x) for x in d.get("shape", [])),
            dtype=str(d.get("dtype", "")),
            blessed=BlessInfo.from_json(d.get("blessed", {})),
            environment=dict(d.get("environment", {})),
            harness_version=str(d.get("harness_version", "0+unknown")),
            metric_settings=dict(d.get("metric_settings", {})),
            fps=d.get("fps"),
            sample_rate=d.get("sample_rate"),
            source_hash=str(d.get("source_hash", "")),
        )


@dataclass(frozen=True)
class Manifest:
    """The parsed ``manifest.json``: entries keyed by (reference id, platform class, output)."""

    entries: Mapping[tuple[str, str, str], ReferenceEntry] = field(default_factory=dict)
    format_version: int = FORMAT_VERSION

    def to_json(self) -> dict[str, Any]:
        refs: dict[str, dict[str, dict[str, Any]]] = {}
        for (ref, plat, out), entry in sorted(self.entries.items()):
            refs.setdefault(ref, {}).setdefault(plat, {})[out] = entry.to_json()
        return {"format_version": self.format_version, "references": refs}

    @classmethod
    def from_json(cls, d: Any, path: Path) -> Manifest:
        if not isinstance(d, Mapping) or "format_version" not in d:
            raise ReferenceStoreError(f"{path}: not a reference manifest (no 'format_version')")
        version = d["format_version"]
        if version != FORMAT_VERSION:
            raise ReferenceStoreError(
                f"{path}: manifest format_version {version!r} is not supported by this harness "
                f"(it reads format_version {FORMAT_VERSION}); use the harness version that wrote "
                "it, or re-bless the references with `harness refs bless`"
            )
        entries: dict[tuple[str, str, str], ReferenceEntry] = {}
        try:
            for ref, by_platform in d.get("references", {}).items():
                for plat, by_output in by_platform.items():
                    for out, raw in by_output.items():
                        entries[(ref, plat, out)] = ReferenceEntry.from_json(raw)
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise ReferenceStoreError(f"{path}: malformed manifest entry: {exc!r}") from exc
        return cls(entries=entries, format_version=version)

    def dumps(self) -> str:
        """Stable, diff-friendly JSON text."""
        return json.dumps(self.to_json(), indent=2, sort_keys=True) + "\n"


def read_manifest(root: Path) -> Manifest:
    """The manifest of the store at ``root``; an empty one when the file does not exist."""
    path = root / MANIFEST_NAME
    if not path.exists():
        return Manifest()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ReferenceStoreError(f"{path}: cannot read the reference manifest: {exc}") from exc
    return Manifest.from_json(data, path)


class ReferenceStore:
    """Read-only view of a reference store; every file is hash-verified before it is used."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)
        self._manifest: Manifest | None = None
        # Decoded files, verified once per store: several checks of one attempt compare the
        # same reference, and re-hashing and re-decoding every PNG per check was pure waste.
        self._decoded: dict[str, Any] = {}

    @property
    def manifest(self) -> Manifest:
        """The parsed manifest, read on first use (so a bad one fails the check that needs it)."""
        if self._manifest is None:
            self._manifest = read_manifest(self.root)
        return self._manifest

    @property
    def entries(self) -> Mapping[tuple[str, str, str], ReferenceEntry]:
        return self.manifest.entries

    def get(self, reference_id: str, output: str, platform_class: str) -> ReferenceEntry | None:
        """The entry pinned for exactly this platform class, or None (no fallback)."""
        return self.manifest.entries.get((reference_id, platform_class, output))

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
        raise ReferenceStoreError(
            f"no reference for output '{output}' of '{reference_id}' on platform chain "
            f"{list(platform_chain)}: {detail}; bless one with "
            f"`harness refs bless --run <run dir> --case {reference_id}`"
        )

    # --- reading verified files -------------------------------------------------------------

    def verified_path(self, f: ReferenceFile) -> Path:
        """The absolute path of ``f`` after checking it exists and its SHA-256 matches."""
        path = self.root / f.path
        if not path.is_file():
            raise ReferenceStoreError(
                f"reference file {path} is missing (expected sha256 {f.sha256}, actual: none)"
            )
        actual = file_sha256(path)
        if actual != f.sha256:
            raise ReferenceStoreError(
                f"reference file {path} does not match the manifest: "
                f"expected sha256 {f.sha256}, actual sha256 {actual}"
            )
        return path

    def _read(self, f: ReferenceFile, decode: Callable[[Path], Any]) -> Any:
        """``decode`` of the verified file, computed once per store; arrays come back
        read-only so one check cannot change what the next one compares with."""
        if f.path not in self._decoded:
            value = decode(self.verified_path(f))
            if isinstance(value, np.ndarray):
                value.setflags(write=False)
            self._decoded[f.path] = value
        return self._decoded[f.path]

    def load_video(self, entry: ReferenceEntry, frames: Sequence[int] | None = None) -> np.ndarray:
        """Frames of a ``video`` entry as uint8 [T, H, W, 3] (an ``image`` entry: [H, W, 3]).

        ``frames`` loads (and verifies) only those frame indices, in that order, as
        [len(frames), H, W, 3]: a check on first-mid-last frames reads three PNGs, not all.
        """
        from harness import media

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
        missing = [i for i in wanted if i not in by_index]
        if missing:
            raise ReferenceStoreError(
                f"reference {entry.key} has {n} frames, no frame {missing[0]}"
            )
        frame_shape = tuple(entry.shape[1:] if entry.kind == "video" else entry.shape)
        arrays = []
        for i in wanted:
            path = self.root / by_index[i].path
            a = np.asarray(self._read(by_index[i], media.read_png))
            if a.shape != frame_shape or a.dtype != np.uint8:
                raise ReferenceStoreError(
                    f"reference file {path} decodes to {a.dtype} {list(a.shape)}, "
                    f"manifest says uint8 {list(frame_shape)}"
                )
            arrays.append(a)
        video = np.stack(arrays)
        if frames is None and entry.kind == "image":
            return video[0]
        return video

    def load_audio(self, entry: ReferenceEntry) -> tuple[np.ndarray, int]:
        """PCM of an ``audio`` entry as float32 (the shape it was blessed) and its sample rate."""
        from harness import media

        if entry.kind != "audio":
            raise ReferenceStoreError(f"reference {entry.key} is {entry.kind}, not audio")
        (f,) = self._single(entry)
        audio = self._read(f, media.read_wav)
        pcm = np.asarray(audio.pcm, dtype=np.float32)
        if pcm.size != int(np.prod(entry.shape)):
            raise ReferenceStoreError(
                f"reference {entry.key}: {f.path} decodes to shape {list(pcm.shape)}, "
                f"manifest says {list(entry.shape)}"
            )
        return pcm.reshape(entry.shape), int(audio.sample_rate)

    def load_tensor(self, entry: ReferenceEntry) -> np.ndarray:
        """The array of a ``tensor`` entry (safetensors key ``data``)."""
        from safetensors.numpy import load_file

        (f,) = self._single(entry)

        def read(path: Path) -> np.ndarray:
            try:
                return load_file(str(path))["data"]
            except Exception as exc:  # safetensors raises its own error types
                raise ReferenceStoreError(f"reference file {path} cannot be loaded: {exc}") from exc

        return np.asarray(self._read(f, read))

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

        Checks that each manifest file exists and matches its SHA-256, that no two entries claim
        one file, and reports files on disk that the manifest does not list.
        """
        if not self.root.is_dir():
            return [f"{self.root}: reference store folder does not exist"]
        try:
            manifest = self.manifest
        except ReferenceStoreError as exc:
            return [str(exc)]
        problems: list[str] = []
        listed: dict[str, str] = {}
        for entry in manifest.entries.values():
            if not entry.files:
                problems.append(f"{entry.key}: manifest entry lists no files")
            for f in entry.files:
                if f.path in listed:
                    problems.append(f"{f.path}: listed by both {listed[f.path]} and {entry.key}")
                listed[f.path] = entry.key
                try:
                    self.verified_path(f)
                except ReferenceStoreError as exc:
                    problems.append(f"{entry.key}: {exc}")
        for path in _files_under(self.root):
            rel = path.relative_to(self.root).as_posix()
            if rel not in listed:
                problems.append(
                    f"{path}: file is not in the manifest "
                    f"(sha256 {file_sha256(path)}); remove it or bless it"
                )
        return problems


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
