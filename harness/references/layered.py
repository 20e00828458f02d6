"""Layered references: where one attempt first left the reference its case was blessed from.

``harness refs bless`` pins, beside a case's outputs, the attempt's input hashes and its
fingerprinted intermediates (:class:`~harness.references.manifest.LayersEntry`: each
fingerprint, and its values whole or as a deterministic sample, :mod:`harness.probe.samples`).
:func:`explain` walks that reference layer by layer in recording order, inputs first, against
what an attempt recorded:

* an input: ``identical`` when its hash matches, else ``departed``;
* a fingerprint: ``identical`` when its hash matches; a change of shape or a non-finite value
  the reference does not have is ``departed``; otherwise the relative L2 distance
  ``|run - ref| / |ref|`` of the kept values (the whole tensor, or the sample) is compared
  with the layer's tolerance from platform policy (``[layers] rel_l2``, per-layer globs in
  ``rel_l2_for``; :func:`tolerance_for`), and for a sampled layer the whole tensor's min, max
  and mean (moved by more than the tolerance times the reference's largest magnitude) as well;
* a layer the reference has and the run did not record is ``missing`` (a departure); one the
  run recorded and the reference lacks is ``extra`` (reported, not a departure).

The first departure, and the one-line summary every report prints, are
:func:`harness.model.layers.summarize`'s.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from harness.errors import ReferenceStoreError
from harness.model.layers import LayerResult, ReferenceLayers, no_layered_reference, summarize
from harness.probe.samples import RULE
from harness.references.manifest import LayerPin, LayersEntry
from harness.references.store import ReferenceStore

__all__ = ["compare_layers", "explain", "tolerance_for"]

_NO_LAYERS = (
    "the reference was blessed before layered references, or from a run that recorded no "
    "intermediates; re-bless it from a run of this harness to get one"
)


def tolerance_for(name: str, tolerances: Mapping[str, Any]) -> float:
    """The relative-L2 tolerance of layer ``name``: the first glob of ``rel_l2_for`` that
    matches it, else ``rel_l2``.

    >>> tolerance_for("video.frames", {"rel_l2": 1e-3, "rel_l2_for": {"video.*": 0.02}})
    0.02
    """
    for glob, tol in dict(tolerances.get("rel_l2_for") or {}).items():
        if fnmatch.fnmatchcase(name, glob):
            return float(tol)
    return float(tolerances.get("rel_l2", 1e-3))


def _rel_l2(run: np.ndarray, ref: np.ndarray) -> float:
    a = np.asarray(run, dtype=np.float64).reshape(-1)
    b = np.asarray(ref, dtype=np.float64).reshape(-1)
    finite = np.isfinite(a) & np.isfinite(b)
    a, b = a[finite], b[finite]
    den = max(float(np.linalg.norm(b)), float(np.linalg.norm(a)) * 1e-12, 1e-30)
    return float(np.linalg.norm(a - b)) / den


def _stats_shift(run: Mapping[str, Any], ref: Mapping[str, Any]) -> float | None:
    """How far min, max and mean moved, relative to the reference's largest magnitude."""
    try:
        scale = max(abs(float(ref["min"])), abs(float(ref["max"])), 1e-30)
        moved = max(abs(float(run[k]) - float(ref[k])) for k in ("min", "max", "mean"))
    except (KeyError, TypeError, ValueError):
        return None
    return moved / scale if math.isfinite(moved) else None


def _fingerprint(
    pin: LayerPin,
    ref_values: np.ndarray | None,
    got: Mapping[str, Any],
    values: np.ndarray | None,
    tol: float,
) -> LayerResult:
    def result(status: Any, value: float | None = None, detail: str = "") -> LayerResult:
        return LayerResult(pin.name, "fingerprint", status, "rel_l2", value, tol, detail)

    want = pin.fingerprint
    if got.get("hash") == pin.hash:
        return result("identical", 0.0)
    if list(got.get("shape") or []) != list(want.get("shape") or []):
        return result("departed", None, f"shape {got.get('shape')} vs {want.get('shape')}")
    bad, ref_bad = int(got.get("nonfinite") or 0), int(want.get("nonfinite") or 0)
    if bad > ref_bad:
        return result("departed", None, f"{bad} non-finite values (reference: {ref_bad})")
    if values is None or ref_values is None or values.size != ref_values.size:
        shift = _stats_shift(got, want)
        if shift is None:
            return result("departed", None, "differs; no values kept to measure by how much")
        status = "within" if shift <= tol else "departed"
        return result(status, None, f"no values kept; min/max/mean moved {shift:.2g} of range")
    dist = _rel_l2(values, ref_values)
    if pin.stored == "sample":
        shift = _stats_shift(got, want)
        n = int(np.prod(want.get("shape") or [0]))
        detail = f"on {values.size} sampled of {n} values"
        if shift is not None and shift > tol and dist <= tol:
            return result("departed", dist, f"{detail}; min/max/mean moved {shift:.2g} of range")
        return result("within" if dist <= tol else "departed", dist, detail)
    return result("within" if dist <= tol else "departed", dist)


def compare_layers(
    entry: LayersEntry,
    ref_values: Mapping[str, np.ndarray],
    inputs: Mapping[str, str],
    fingerprints: Mapping[str, Mapping[str, Any]],
    samples: Mapping[str, np.ndarray],
    tolerances: Mapping[str, Any],
) -> ReferenceLayers:
    """The attempt (``inputs``: name -> hash; ``fingerprints``; ``samples``: name -> layer
    sample) against the layered reference ``entry`` with its kept values ``ref_values``."""
    pinned_inputs = [p for p in entry.layers if p.kind == "input"]
    pinned_prints = [p for p in entry.layers if p.kind == "fingerprint"]
    results: list[LayerResult] = []
    for pin in pinned_inputs:
        got = inputs.get(pin.name)
        if got is None:
            results.append(LayerResult(pin.name, "input", "missing", "hash"))
        else:
            same = got == pin.hash
            results.append(
                LayerResult(pin.name, "input", "identical" if same else "departed", "hash", got)
            )
    known = {p.name for p in pinned_inputs}
    results += [
        LayerResult(n, "input", "extra", "hash", h) for n, h in inputs.items() if n not in known
    ]
    for pin in pinned_prints:
        got_print = fingerprints.get(pin.name)
        tol = tolerance_for(pin.name, tolerances)
        if got_print is None:
            results.append(LayerResult(pin.name, "fingerprint", "missing", "rel_l2", None, tol))
            continue
        results.append(
            _fingerprint(pin, ref_values.get(pin.name), got_print, samples.get(pin.name), tol)
        )
    known = {p.name for p in pinned_prints}
    results += [
        LayerResult(n, "fingerprint", "extra", "rel_l2", None, tolerance_for(n, tolerances))
        for n in fingerprints
        if n not in known
    ]
    return summarize(entry.reference_id, results)


def explain(
    store: ReferenceStore,
    reference_id: str,
    chain: Sequence[str],
    *,
    inputs: Mapping[str, str],
    fingerprints: Mapping[str, Mapping[str, Any]],
    samples: Mapping[str, np.ndarray],
    tolerances: Mapping[str, Any],
) -> ReferenceLayers:
    """Where an attempt first left the layered reference of ``reference_id`` on ``chain``; a
    record saying "no layered reference" (never an error) when there is none to compare."""
    try:
        entry = store.layers_on(reference_id, chain)
    except ReferenceStoreError as exc:
        return no_layered_reference(reference_id, f"the reference store cannot be read ({exc})")
    if entry is None:
        return no_layered_reference(
            reference_id, f"none for '{reference_id}' on platform chain {list(chain)}; {_NO_LAYERS}"
        )
    if entry.rule and entry.rule != RULE:
        return no_layered_reference(
            reference_id,
            f"{entry.key} keeps samples by rule {entry.rule!r}, this harness takes {RULE!r}; "
            "re-bless it",
        )
    try:
        ref_values = store.load_layers(entry)
    except ReferenceStoreError as exc:
        return no_layered_reference(reference_id, f"{entry.key} cannot be read: {exc}")
    return compare_layers(entry, ref_values, inputs, fingerprints, samples, tolerances)
