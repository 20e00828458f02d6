"""Bless's layered half: the blessed attempt's input hashes and fingerprinted intermediates,
pinned beside its outputs in the same store and manifest (:mod:`harness.references.layered`
reads them).

The run's worker wrote the attempt's layer samples into ``~layers.safetensors`` in its
output folder and recorded the file's SHA-256 (``intermediates`` of the attempt); a file that
no longer matches is never pinned (the case is refused, as for a changed output). An attempt
recorded without intermediates (a run of an older harness) pins no layered reference: its
outputs are still pinned, and explanations say "no layered reference".
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.errors import ReferenceStoreError
from harness.fsio import write_atomic
from harness.model import Attempt, CaseResult
from harness.probe.samples import RULE
from harness.references.layout import ensure_inside, layers_folder
from harness.references.manifest import (
    BlessInfo,
    LayerPin,
    LayersEntry,
    ReferenceFile,
    file_sha256,
    harness_version,
)

__all__ = ["LAYERS_FILE", "PreparedLayers", "prepare_layers", "write_layers"]

LAYERS_FILE = "layers.safetensors"
_PINNED = ("dtype", "shape", "nonfinite", "min", "max", "mean")


@dataclass(frozen=True)
class PreparedLayers:
    """An attempt's layers, checked against its record and ready to write."""

    attempt: int
    pins: tuple[LayerPin, ...]
    samples: dict[str, np.ndarray]

    def describe(self) -> str:
        inputs = sum(p.kind == "input" for p in self.pins)
        stored = [p.stored for p in self.pins if p.kind == "fingerprint"]
        kept = f"{stored.count('whole')} whole, {stored.count('sample')} sampled"
        return (
            f"{inputs} input hash{'es' if inputs != 1 else ''}, {len(stored)} fingerprinted "
            f"layer{'s' if len(stored) != 1 else ''} ({kept}) from attempt #{self.attempt}"
        )


def _read_samples(run: Path, attempt: Attempt, info: dict[str, Any]) -> dict[str, np.ndarray]:
    from safetensors import safe_open

    raw = Path(str(info["path"]))
    path = raw if raw.is_absolute() else run / raw
    if not path.is_file():
        raise ReferenceStoreError(
            f"attempt #{attempt.index} recorded intermediates in {path}, which does not exist"
        )
    actual = file_sha256(path)
    if actual != info.get("sha256"):
        raise ReferenceStoreError(
            f"intermediates {path} do not match the attempt's record (recorded sha256 "
            f"{info.get('sha256')}, the file now hashes to {actual}); it changed after the run, "
            "and a changed run file is never pinned: bless from an untouched run folder"
        )
    try:
        with safe_open(str(path), framework="numpy") as f:
            return {k: np.asarray(f.get_tensor(k), dtype=np.float32) for k in f.keys()}  # noqa: SIM118
    except Exception as exc:  # safetensors raises its own error types
        raise ReferenceStoreError(f"intermediates {path}: {exc}") from exc


def prepare_layers(run: Path, attempt: Attempt) -> tuple[PreparedLayers | None, str]:
    """The attempt's layers to pin, or None and why there are none (never an error for a run
    recorded without intermediates; :class:`ReferenceStoreError` for a changed file)."""
    info = dict(attempt.intermediates)
    if not info:
        return None, (
            f"attempt #{attempt.index} recorded no intermediates (a run of an older harness, "
            "or one that recorded no inputs or fingerprints)"
        )
    if info.get("rule") != RULE:
        return None, (
            f"attempt #{attempt.index} sampled its layers by rule {info.get('rule')!r}; this "
            f"harness pins rule {RULE!r}: re-run it with this harness"
        )
    samples = _read_samples(run, attempt, info) if info.get("path") else {}
    pins = [LayerPin(n, "input", h) for n, h in attempt.inputs.items()]
    for name, fp in attempt.fingerprints.items():
        kept = samples.get(name)
        numel = int(np.prod(fp.get("shape") or [0]))
        stored = "none" if kept is None else "whole" if kept.size == numel else "sample"
        # What a comparison reads: the hash is the pin's own, and where the tensor lived is in
        # the entry's provenance (its platform), not needed per layer.
        described = {k: v for k, v in fp.items() if k in _PINNED}
        pins.append(LayerPin(name, "fingerprint", str(fp.get("hash", "")), described, stored))
    if not pins:
        return None, f"attempt #{attempt.index} recorded no inputs and no fingerprints"
    kept_samples = {p.name: samples[p.name] for p in pins if p.stored != "none"}
    return PreparedLayers(attempt.index, tuple(pins), kept_samples), ""


def write_layers(
    root: Path,
    result: CaseResult,
    prepared: PreparedLayers,
    platform_class: str,
    info: BlessInfo,
) -> LayersEntry:
    """Write the layered reference's file into a fresh content-addressed folder; its entry."""
    from safetensors.numpy import save_file

    reference_id = result.reference or result.id
    h = hashlib.sha256(json.dumps([p.to_json() for p in prepared.pins]).encode())
    for name, a in prepared.samples.items():
        h.update(name.encode())
        h.update(np.ascontiguousarray(a).tobytes())
    file = None
    if prepared.samples:
        folder = root / layers_folder(reference_id, platform_class) / h.hexdigest()[:12]
        ensure_inside(root, folder)
        folder.mkdir(parents=True, exist_ok=True)
        path = ensure_inside(root, folder / LAYERS_FILE)
        tensors = {k: np.ascontiguousarray(v) for k, v in prepared.samples.items()}
        meta = {"rule": RULE, "order": "\n".join(tensors)}
        write_atomic(path, lambda t: save_file(tensors, str(t), metadata=meta))
        file = ReferenceFile(path.relative_to(root).as_posix(), file_sha256(path))
    return LayersEntry(
        reference_id=reference_id,
        platform_class=platform_class,
        case_id=result.id,
        layers=prepared.pins,
        file=file,
        rule=RULE,
        blessed=info,
        attempt=prepared.attempt,
        platform=result.platform,
        harness_version=harness_version(),
    )
