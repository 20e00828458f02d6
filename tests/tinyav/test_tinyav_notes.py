"""Note checks that can fail: each pipeline/loader note is something the code decided, so a
plausible bug turns the case's own check red (where an echo of the params stayed green)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import tinyav.checkpoint
import tinyav.pipeline
from tinyav.checkpoint import FORMATS, reference_model, save_safetensors, state_dict_for
from tinyav.loader import inspect_checkpoint, quantized_modules
from tinyav.scenarios import pipeline as sp
from torch import nn

from harness.cases import load_file
from harness.model import Case

ROOT = Path(__file__).resolve().parents[2]
# tinyav's cases (cases/diffusers are another target's, with notes of their own)
CASES = {
    c.id: c
    for f in sorted((ROOT / "cases").glob("*/*.toml"))
    if f.parent.name != "diffusers"
    for c in load_file(f)
}


def failing_notes(case: Case, notes: dict[str, Any], platform: str = "cpu") -> dict[str, Any]:
    """``{key: (got, want)}`` for every ``note.*`` check of ``case`` that these notes fail."""
    bad = {}
    for spec in case.checks:
        if spec.metric.startswith("note."):
            key = spec.metric.removeprefix("note.")
            want = spec.threshold_for((platform, "any"))
            if notes.get(key) != want:
                bad[key] = (notes.get(key), want)
    return bad


def test_the_real_code_passes_these_checks(recorder: Any, tmp_path: Path) -> None:
    sp.t2va(quant="int8", steps=1, workdir=str(tmp_path))
    assert failing_notes(CASES["t2va-int8"], recorder.notes) == {}


def test_int8_checkpoint_loaded_as_float_weights_fails(
    monkeypatch: pytest.MonkeyPatch, recorder: Any, tmp_path: Path
) -> None:
    """The bug: a loader that hands back plain float Linears for an INT8 file. Numerics barely
    move (the dequantized weights are the same), so only what the loader built can tell."""
    from tinyav.quant.convrot_int8 import dequantize_weight

    real = tinyav.pipeline.load_dit

    def as_float(*args: Any, **kwargs: Any) -> Any:
        model = real(*args, **kwargs)
        for name, mod in quantized_modules(model).items():
            lin = nn.Linear(mod.in_features, mod.out_features, bias=mod.bias is not None)
            lin.weight.data = dequantize_weight(
                mod.weight, mod.weight_scale, convrot=mod.convrot, groupsize=mod.groupsize
            )
            if mod.bias is not None:
                lin.bias.data = mod.bias.clone()
            parent, _, leaf = name.rpartition(".")
            setattr(model.get_submodule(parent) if parent else model, leaf, lin)
        return model.requires_grad_(False)

    monkeypatch.setattr(tinyav.pipeline, "load_dit", as_float)
    sp.t2va(quant="int8", steps=1, workdir=str(tmp_path))
    bad = failing_notes(CASES["t2va-int8"], recorder.notes)
    assert bad["loader.quantized_layers"] == (0, 26)
    assert bad["dispatch.int8_mm.ran"] == ("none", "dequant_matmul")
    assert "checkpoint.format" not in bad  # the file itself is INT8


def test_wrong_file_written_fails_the_format_check(
    monkeypatch: pytest.MonkeyPatch, recorder: Any, tmp_path: Path
) -> None:
    """The bug: the scenario (or writer) produces a bf16 file when asked for INT8."""
    real = tinyav.checkpoint.write_checkpoint
    monkeypatch.setattr(
        tinyav.checkpoint, "write_checkpoint", lambda path, fmt, **kw: real(path, "bf16", **kw)
    )
    sp.t2va(quant="int8", steps=1, workdir=str(tmp_path))
    bad = failing_notes(CASES["t2va-int8"], recorder.notes)
    assert bad["checkpoint.format"] == ("bf16", "int8_tensorwise")
    assert bad["loader.quantized_layers"] == (0, 26)


def test_ref2va_that_drops_its_references_fails_the_mode_check(
    monkeypatch: pytest.MonkeyPatch, recorder: Any, tmp_path: Path
) -> None:
    """The bug: reference media are synthesized but never reach the request/DiT."""
    real = tinyav.pipeline.Request

    def dropping(*args: Any, **kwargs: Any) -> Any:
        kwargs.pop("reference_video", None)
        kwargs.pop("reference_audio", None)
        return real(*args, **kwargs)

    monkeypatch.setattr(tinyav.pipeline, "Request", dropping)
    sp.ref2va(quant="bf16", steps=1, workdir=str(tmp_path))
    bad = failing_notes(CASES["ref2va-bf16"], recorder.notes)
    assert bad == {"pipeline.mode": ("t2va", "ref2va")}


@pytest.mark.parametrize(
    ("fmt", "want"),
    [("bf16", "bf16"), ("int8_convrot", "int8_tensorwise"), ("fp8", "float8_e4m3fn")],
)
def test_format_is_read_from_markers_and_dtypes_not_metadata(
    tmp_path: Path, fmt: str, want: str
) -> None:
    assert fmt in FORMATS
    model = reference_model()
    path = tmp_path / "ckpt.safetensors"
    # Metadata that lies about the format: detection must not read it.
    meta = {
        "format": "pt",
        "tinyav.variant": "full",
        "tinyav.format": "something-else",
        "tinyav.config": model.cfg.to_json(),
    }
    save_safetensors(state_dict_for(model, fmt), path, meta)  # type: ignore[arg-type]
    assert inspect_checkpoint(path).format == want


def test_every_pipeline_case_checks_what_was_detected_and_built() -> None:
    """Each pipeline case checks the detected format and the built quantized layers, and no
    case checks a bare ``dispatch.<op>`` key (the plan, which used to read as what ran)."""
    for case in CASES.values():
        keys = {s.metric.removeprefix("note.") for s in case.checks if s.metric.startswith("note.")}
        assert not {"dispatch.int8_mm", "dispatch.residual_gate"} & keys, case.id
        if case.kind == "pipeline":
            assert {"checkpoint.format", "loader.quantized_layers"} <= keys, case.id
