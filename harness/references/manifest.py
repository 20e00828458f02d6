"""The reference manifest: what each pinned file is, where it came from and its SHA-256.

``references/manifest.json`` maps ``reference id -> platform class -> output name`` to one
:class:`ReferenceEntry`. Read here; written only by :mod:`harness.references.bless`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import ReferenceStoreError

# 2: adds "layers" (layered references); a version-1 manifest reads as one without layers.
FORMAT_VERSION = 2
READS_VERSIONS = (1, 2)
MANIFEST_NAME = "manifest.json"
ANY = "any"


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
    platform: str | None = None  # the platform of the result it was blessed from

    @property
    def key(self) -> str:
        """``<reference id>/<platform class>/<output>``, for messages."""
        return f"{self.reference_id}/{self.platform_class}/{self.output}"

    @property
    def blessed_on(self) -> str | None:
        """The platform the pinned output was computed on: recorded by bless; for an entry
        from before that, ``cpu`` when its environment had no device, else unknown (None).
        An ``any`` entry is some real platform's output, never every platform's."""
        if self.platform:
            return self.platform
        env = self.environment
        if env.get("device_count") == 0 and not env.get("devices"):
            return "cpu"
        return None

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
            "platform": self.platform,
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
            platform=d.get("platform"),
        )


@dataclass(frozen=True)
class LayerPin:
    """One layer of a layered reference: an input (its hash) or a fingerprinted intermediate
    (its fingerprint, and whether its values are kept ``whole``, as a ``sample``, or ``none``:
    compared by hash and statistics alone)."""

    name: str
    kind: str  # "input" | "fingerprint"
    hash: str
    fingerprint: Mapping[str, Any] = field(default_factory=dict)
    stored: str = "none"

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "kind": self.kind, "hash": self.hash}
        if self.kind == "fingerprint":
            d["fingerprint"] = dict(self.fingerprint)
            d["stored"] = self.stored
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> LayerPin:
        return cls(
            name=str(d["name"]),
            kind=str(d["kind"]),
            hash=str(d.get("hash", "")),
            fingerprint=dict(d.get("fingerprint", {})),
            stored=str(d.get("stored", "none")),
        )


@dataclass(frozen=True)
class LayersEntry:
    """The layered reference of one reference id on one platform class, pinned by the same
    bless as its outputs from the same attempt: the attempt's inputs and fingerprints in
    recording order, and one safetensors file (``file``; None when no layer kept values) of
    the layer samples taken by ``rule`` (:mod:`harness.probe.samples`)."""

    reference_id: str
    platform_class: str
    case_id: str
    layers: tuple[LayerPin, ...]
    file: ReferenceFile | None
    rule: str
    blessed: BlessInfo
    attempt: int = 0
    platform: str | None = None
    harness_version: str = "0+unknown"

    @property
    def key(self) -> str:
        return f"{self.reference_id}/{self.platform_class}/layers"

    @property
    def files(self) -> tuple[ReferenceFile, ...]:
        return (self.file,) if self.file is not None else ()

    def to_json(self) -> dict[str, Any]:
        return {
            "reference_id": self.reference_id,
            "platform_class": self.platform_class,
            "case_id": self.case_id,
            "attempt": self.attempt,
            "platform": self.platform,
            "rule": self.rule,
            "file": self.file.to_json() if self.file is not None else None,
            "layers": [x.to_json() for x in self.layers],
            "harness_version": self.harness_version,
            "blessed": self.blessed.to_json(),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> LayersEntry:
        f = d.get("file")
        return cls(
            reference_id=str(d["reference_id"]),
            platform_class=str(d["platform_class"]),
            case_id=str(d.get("case_id", d["reference_id"])),
            layers=tuple(LayerPin.from_json(x) for x in d.get("layers", [])),
            file=ReferenceFile.from_json(f) if f else None,
            rule=str(d.get("rule", "")),
            blessed=BlessInfo.from_json(d.get("blessed", {})),
            attempt=int(d.get("attempt", 0)),
            platform=d.get("platform"),
            harness_version=str(d.get("harness_version", "0+unknown")),
        )


@dataclass(frozen=True)
class Manifest:
    """The parsed ``manifest.json``: entries keyed by (reference id, platform class, output),
    layered references by (reference id, platform class)."""

    entries: Mapping[tuple[str, str, str], ReferenceEntry] = field(default_factory=dict)
    format_version: int = FORMAT_VERSION
    layers: Mapping[tuple[str, str], LayersEntry] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        refs: dict[str, dict[str, dict[str, Any]]] = {}
        for (ref, plat, out), entry in sorted(self.entries.items()):
            refs.setdefault(ref, {}).setdefault(plat, {})[out] = entry.to_json()
        layers: dict[str, dict[str, Any]] = {}
        for (ref, plat), lentry in sorted(self.layers.items()):
            layers.setdefault(ref, {})[plat] = lentry.to_json()
        # Written as the current version: a bless into a version-1 store upgrades it.
        return {"format_version": FORMAT_VERSION, "references": refs, "layers": layers}

    @classmethod
    def from_json(cls, d: Any, path: Path) -> Manifest:
        if not isinstance(d, Mapping) or "format_version" not in d:
            raise ReferenceStoreError(f"{path}: not a reference manifest (no 'format_version')")
        version = d["format_version"]
        if version not in READS_VERSIONS:
            raise ReferenceStoreError(
                f"{path}: manifest format_version {version!r} is not supported by this harness "
                f"(it reads format_version {', '.join(map(str, READS_VERSIONS))}); use the "
                "harness version that wrote it, or re-bless the references with "
                "`harness refs bless`"
            )
        entries: dict[tuple[str, str, str], ReferenceEntry] = {}
        try:
            for ref, by_platform in d.get("references", {}).items():
                for plat, by_output in by_platform.items():
                    for out, raw in by_output.items():
                        entries[(ref, plat, out)] = ReferenceEntry.from_json(raw)
            layers = {
                (ref, plat): LayersEntry.from_json(raw)
                for ref, by_platform in d.get("layers", {}).items()
                for plat, raw in by_platform.items()
            }
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise ReferenceStoreError(f"{path}: malformed manifest entry: {exc!r}") from exc
        return cls(entries=entries, format_version=version, layers=layers)

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
