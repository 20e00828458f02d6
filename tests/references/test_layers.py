"""Layered references without a worker: the sampling rule, the layer-by-layer comparison, and
the bad inputs (a run recorded without intermediates, a store blessed before layers) that must
say "no layered reference", never fail."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from refs_helpers import MakeRun, video

from harness.model.layers import summarize
from harness.platforms.policy import resolve
from harness.probe import describe
from harness.probe.samples import SAMPLE_N, WHOLE_MAX, layer_sample, sample_indices
from harness.references.bless import bless
from harness.references.layered import compare_layers, explain
from harness.references.manifest import BlessInfo, LayerPin, LayersEntry
from harness.references.store import ReferenceStore


def test_sample_rule_is_stratified_deterministic_and_kept_whole_when_small() -> None:
    idx = sample_indices(196608)  # a [16, 64, 64, 3] video
    assert idx == sample_indices(196608) and len(idx) == SAMPLE_N == len(set(idx))
    width = 196608 // SAMPLE_N
    assert all(i * width <= x < (i + 1) * width for i, x in enumerate(idx))  # one per stratum
    assert len({x % 3 for x in idx}) == 3  # no aliasing onto one colour channel
    small = np.arange(WHOLE_MAX, dtype=np.float64).reshape(16, -1)
    np.testing.assert_array_equal(layer_sample(small), small.astype(np.float32))
    big = torch.arange(4096, dtype=torch.bfloat16).reshape(64, 64)
    got = layer_sample(big)
    assert got.dtype == np.float32 and got.shape == (SAMPLE_N,)
    np.testing.assert_array_equal(got, big.float().reshape(-1)[list(sample_indices(4096))].numpy())
    assert layer_sample(np.array([1 + 2j])) is None and layer_sample([1, 2]) is None


def _entry(prints: dict[str, np.ndarray], stored: str = "whole") -> LayersEntry:
    pins = [LayerPin("prompt", "input", "blake3:p")]
    pins += [
        LayerPin(n, "fingerprint", describe(a)["hash"], describe(a), stored)
        for n, a in prints.items()
    ]
    info = BlessInfo("r", "ci", "2026-12-02T00:00:00+00:00")
    return LayersEntry("ref", "any", "case", tuple(pins), None, "", info)


def _explain(entry: LayersEntry, prints: dict[str, np.ndarray], tol: dict, **kw: object):
    ref = {p.name: layer_sample(a) for p, a in zip(entry.layers[1:], kw.pop("ref"), strict=True)}  # type: ignore[arg-type]
    inputs = kw.pop("inputs", {"prompt": "blake3:p"})
    fps = {n: describe(a) for n, a in prints.items()}
    samples = {n: layer_sample(a) for n, a in prints.items()}
    return compare_layers(entry, ref, inputs, fps, samples, tol)  # type: ignore[arg-type]


def test_simulated_hip_tolerance_from_policy_localizes_what_cpu_tolerance_flags_earlier() -> None:
    # The tolerances a simulated HIP run and a CPU run are judged by come from platform policy.
    rng = np.random.default_rng(0)
    a, b, c = (rng.standard_normal(64).astype(np.float32) for _ in range(3))
    entry = _entry({"text.context": a, "denoise.step00": b, "denoise.step01": c})
    run = [a, b * (1 + 3e-3), c * (1 + 5e-2)]
    prints = dict(zip(["text.context", "denoise.step00", "denoise.step01"], run, strict=True))
    cpu = _explain(entry, prints, resolve("cpu").layer_tolerances(), ref=[a, b, c])
    hip = _explain(entry, prints, resolve("hip").layer_tolerances(), ref=[a, b, c])
    assert cpu.first_departure == "denoise.step00" and hip.first_departure == "denoise.step01"
    assert hip.summary == (
        "inputs identical (1 hash); text.context identical; denoise.step00 within tolerance "
        "(rel L2 3e-3 <= 1e-2); denoise.step01 rel L2 5e-2 > 1e-2: first departure"
    )
    assert cpu.summary.endswith(
        "denoise.step00 rel L2 3e-3 > 1e-3: first departure; 1 later layer departed"
    )


def test_missing_extra_shape_nonfinite_and_changed_input() -> None:
    a = np.ones(8, np.float32)
    entry = _entry({"x": a, "y": a, "z": a, "gone": a})
    run = {"x": np.ones(4, np.float32), "y": np.full(8, np.nan, np.float32), "z": a, "new": a}
    got = _explain(entry, run, {"rel_l2": 1e-3}, ref=[a, a, a, a], inputs={"prompt": "blake3:q"})
    status = {x.name: (x.status, x.detail) for x in got.layers}
    assert status["prompt"][0] == "departed" and got.first_departure == "prompt"
    assert status["x"] == ("departed", "shape [4] vs [8]")
    assert status["y"] == ("departed", "8 non-finite values (reference: 0)")
    assert status["z"][0] == "identical" and status["gone"][0] == "missing"
    assert status["new"][0] == "extra"  # reported, not a departure
    assert got.summary.startswith("input prompt differs: first departure; 3 later layers")
    assert got.summary.endswith("not in the reference: new")
    assert summarize("r", []).status == "identical"


def test_bless_of_a_run_without_intermediates_pins_outputs_without_layers(
    make_run: MakeRun, store_root: Path
) -> None:
    run = make_run("old", {"t2va": {"video": ("video", video(), {"fps": 8})}})  # no intermediates
    summary = bless(run, store_root, reason="first", who="ci")
    assert [b.output for b in summary.blessed] == ["video"]  # the reference is still pinned
    assert "layers t2va/any: none (attempt #0 recorded no intermediates" in summary.format()
    store = ReferenceStore(store_root)
    assert store.manifest.layers == {} and store.verify() == []
    got = explain(
        store, "t2va", ["cpu", "any"], inputs={}, fingerprints={"x": {}}, samples={}, tolerances={}
    )
    assert got.status == "no_layered_reference" and got.first_departure is None
    assert got.summary.startswith("no layered reference: none for 't2va' on platform chain")


def test_old_store_without_layers_reads_as_no_layered_reference(store_root: Path) -> None:
    store_root.mkdir()
    # A store blessed before layered references: format_version 1, no "layers".
    (store_root / "manifest.json").write_text(json.dumps({"format_version": 1, "references": {}}))
    store = ReferenceStore(store_root)
    got = explain(
        store, "t2va", ["any"], inputs={"p": "h"}, fingerprints={}, samples={}, tolerances={}
    )
    assert (
        got.status == "no_layered_reference" and "blessed before layered references" in got.summary
    )
    assert store.verify() == []


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ("[policy.layers]\nrel_l2 = -1", "key 'policy.layers.rel_l2' = -1"),
        ("[policy.layers]\nrel_l2_for = 3", "key 'policy.layers.rel_l2_for' = 3"),
        ("[policy.layers]\nrtol = 1", "unknown key 'policy.layers.rtol'"),
    ],
)
def test_layer_policy_errors_name_the_key(tmp_path: Path, table: str, message: str) -> None:
    import tomllib

    from harness.errors import ProfileError
    from harness.platforms.policy import validate_table

    with pytest.raises(ProfileError, match=message.replace(".", r"\.")):
        validate_table(tmp_path / "r.toml", "policy", tomllib.loads(table)["policy"])
