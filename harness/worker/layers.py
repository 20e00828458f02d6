"""An attempt's layers, inside the worker: the layer samples it recorded, written beside its
outputs for ``harness refs bless`` to pin, and, when its quality checks failed or the run
asked ``--explain``, where it first left its layered reference (compared here, next to the
data, as the quality checks are)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.fsio import write_atomic
from harness.model import CheckResult
from harness.model.layers import ReferenceLayers, no_layered_reference
from harness.model.vocab import QUALITY_METRICS
from harness.probe.samples import RULE

__all__ = ["INTERMEDIATES_FILE", "explain_attempt", "quality_failed", "write_intermediates"]

# No output's file can have this name: output files are slug(name) + suffix, and no slug
# starts with "~" (harness.fsio.slug).
INTERMEDIATES_FILE = "~layers.safetensors"


def write_intermediates(
    samples: Mapping[str, Any], output_dir: Path | None, *, recorded: bool
) -> dict[str, Any]:
    """Write the layer samples (name -> float32 array, in recording order) into the attempt's
    output folder; the attempt's ``intermediates`` record: empty when the attempt ``recorded``
    no inputs or fingerprints, without a file when no layer kept values (inputs alone, or
    fingerprints of what is not a tensor: pinned by hash)."""
    if not recorded:
        return {}
    if not samples or output_dir is None:
        return {"rule": RULE, "count": 0}
    from safetensors.numpy import save_file

    output_dir.mkdir(parents=True, exist_ok=True)
    path = output_dir / INTERMEDIATES_FILE
    tensors = dict(samples)
    order = "\n".join(tensors)  # safetensors sorts its keys; the recording order is kept here
    meta = {"rule": RULE, "order": order}
    write_atomic(path, lambda t: save_file(tensors, str(t), metadata=meta))
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return {"path": os.fspath(path), "sha256": digest, "rule": RULE, "count": len(tensors)}


def quality_failed(checks: Sequence[CheckResult]) -> bool:
    """Whether a quality check (a metric against a reference, or finiteness) failed."""
    quality = {*QUALITY_METRICS, "nonfinite"}
    return any(c.passed is False and c.metric in quality for c in checks)


def explain_attempt(
    *,
    reference_id: str | None,
    references_root: str | None,
    chain: Sequence[str],
    inputs: Mapping[str, str],
    fingerprints: Mapping[str, Mapping[str, Any]],
    samples: Mapping[str, Any],
    tolerances: Mapping[str, Any],
) -> ReferenceLayers:
    """Where the attempt first left its layered reference (see
    :func:`harness.references.layered.explain`)."""
    if not reference_id:
        return no_layered_reference("", "the case names no reference")
    if not references_root:
        return no_layered_reference(reference_id, "the run was given no reference store")
    # Imported here: numpy and PyAV, which a fresh-process worker whose case checks no output
    # never loads (harness.execution.pool.WORKER_MODULES preloads them in persistent ones).
    from harness.references.layered import explain
    from harness.references.store import ReferenceStore

    store = ReferenceStore(Path(references_root))
    return explain(
        store,
        reference_id,
        chain,
        inputs=inputs,
        fingerprints=fingerprints,
        samples=samples,
        tolerances=tolerances,
    )
