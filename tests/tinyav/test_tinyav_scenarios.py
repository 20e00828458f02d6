"""The scenarios package: one module per case kind, an empty ``__init__``, torch-free imports,
one frozen parameter record shared by ``t2va`` and ``ref2va``, and real device selection."""

from __future__ import annotations

import dataclasses
import inspect
import os
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest
import torch
from tinyav import dispatch
from tinyav.scenarios import _common
from tinyav.scenarios import pipeline as sp
from tinyav.scenarios.pipeline import GenerationParams

from harness.cases import load_file

ROOT = Path(__file__).resolve().parents[2]
TARGET = ROOT / "targets" / "tinyav"
PACKAGE = TARGET / "tinyav" / "scenarios"
KIND_MODULE = {
    "pipeline": "tinyav.scenarios.pipeline",
    "loader": "tinyav.scenarios.loader",
    "quant": "tinyav.scenarios.quant",
    "import": "tinyav.scenarios.imports",
}


def _bare(code: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TARGET), str(ROOT)])}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )


# -- layout --------------------------------------------------------------------------------------


def test_package_init_is_empty_and_imports_nothing() -> None:
    assert (PACKAGE / "__init__.py").read_text() == ""
    assert not (TARGET / "tinyav" / "scenarios.py").exists()
    proc = _bare(
        "import sys; before = set(sys.modules); import tinyav.scenarios\n"
        "print(sorted(m for m in set(sys.modules) - before))"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "['tinyav', 'tinyav.scenarios']"


def test_no_scenario_module_imports_torch_at_import() -> None:
    mods = sorted({*KIND_MODULE.values(), "tinyav.scenarios._common"})
    proc = _bare(
        "import importlib, sys\n"
        f"for m in {mods!r}: importlib.import_module(m)\n"
        "print(sorted(m for m in ('torch', 'numpy', 'safetensors', 'av') if m in sys.modules))"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_modules_stay_small() -> None:
    for path in PACKAGE.glob("*.py"):
        assert len(path.read_text().splitlines()) <= 400, path.name


def test_every_case_names_the_module_of_its_kind() -> None:
    cases = [c for f in sorted((ROOT / "cases").glob("*/*.toml")) for c in load_file(f)]
    tinyav_cases = [c for c in cases if (c.target or "").startswith("tinyav.")]
    assert len(tinyav_cases) >= 40
    for c in tinyav_cases:
        module, _, _ = (c.target or "").partition(":")
        want = "tinyav.scenarios.multirank" if c.ranks > 1 else KIND_MODULE[c.kind]
        assert module == want, f"{c.id}: {c.target}"
    for f in (ROOT / "cases").rglob("*.toml"):
        assert "tinyav.scenarios:" not in f.read_text(), f"{f}: old scenario path"


def test_platform_lists_agree() -> None:
    assert _common.PLATFORMS == dispatch.PLATFORMS


# -- one parameter record ------------------------------------------------------------------------


def test_generation_params_is_frozen_and_validated() -> None:
    p = GenerationParams(quant="int8", steps=2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.steps = 3  # type: ignore[misc]
    with pytest.raises(TypeError, match="stepz"):
        GenerationParams(stepz=2)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="quant must be one of"):
        GenerationParams(quant="nvfp4")
    with pytest.raises(ValueError, match="variant must be one of"):
        GenerationParams(variant="tiny")


@pytest.mark.parametrize("fn", [sp.t2va, sp.ref2va], ids=["t2va", "ref2va"])
def test_keyword_signature_is_the_record(fn: Any) -> None:
    params = inspect.signature(fn).parameters
    fields = dataclasses.fields(GenerationParams)
    assert list(params) == [f.name for f in fields]
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params.values())
    assert [p.default for p in params.values()] == [f.default for f in fields]
    with pytest.raises(TypeError):
        inspect.signature(fn).bind(stepz=2)  # case files with a typo fail to bind
    with pytest.raises(TypeError, match="stepz"):
        fn(stepz=2)


def test_t2va_and_ref2va_share_one_record(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[GenerationParams, bool]] = []
    monkeypatch.setattr(
        sp, "generate", lambda params, *, reference: seen.append((params, reference))
    )
    sp.t2va(quant="int8", steps=2, seed=5)
    sp.ref2va(quant="int8", steps=2, seed=5)
    want = GenerationParams(quant="int8", steps=2, seed=5)
    assert seen == [(want, False), (want, True)]


# -- device selection ----------------------------------------------------------------------------


@pytest.fixture
def no_devices(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """A CUDA (not HIP) torch build with no device of any kind."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "hip", None, raising=False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    if hasattr(torch, "xpu"):
        monkeypatch.setattr(torch.xpu, "is_available", lambda: False)
    monkeypatch.delitem(sys.modules, "torch_npu", raising=False)
    return monkeypatch


@pytest.mark.parametrize("platform", _common.PLATFORMS)
def test_cpu_when_nothing_is_there(no_devices: pytest.MonkeyPatch, platform: str) -> None:
    assert _common.device_for(platform) == "cpu"


@pytest.mark.parametrize(
    ("hip_version", "want"),
    [(None, {"cuda": "cuda", "hip": "cpu"}), ("6.2", {"cuda": "cpu", "hip": "cuda"})],
    ids=["cuda-build", "rocm-build"],
)
def test_cuda_and_hip_need_the_matching_build(
    no_devices: pytest.MonkeyPatch, hip_version: str | None, want: dict[str, str]
) -> None:
    no_devices.setattr(torch.cuda, "is_available", lambda: True)
    no_devices.setattr(torch.version, "hip", hip_version, raising=False)
    assert {p: _common.device_for(p) for p in want} == want


@pytest.mark.parametrize("available", [True, False])
def test_npu_needs_torch_npu_and_a_device(no_devices: pytest.MonkeyPatch, available: bool) -> None:
    no_devices.setitem(sys.modules, "torch_npu", types.ModuleType("torch_npu"))
    npu = types.SimpleNamespace(is_available=lambda: available)
    no_devices.setattr(torch, "npu", npu, raising=False)
    assert _common.device_for("npu") == ("npu" if available else "cpu")


def test_npu_without_torch_npu_is_cpu(no_devices: pytest.MonkeyPatch) -> None:
    # torch.npu alone (e.g. a stale attribute) is not enough: the plugin must import.
    no_devices.setattr(
        torch, "npu", types.SimpleNamespace(is_available=lambda: True), raising=False
    )
    real_import = _common.importlib.import_module

    def no_plugin(name: str, *args: Any) -> Any:
        if name == "torch_npu":
            raise ImportError("No module named 'torch_npu'")
        return real_import(name, *args)

    no_devices.setattr(_common.importlib, "import_module", no_plugin)
    assert _common.device_for("npu") == "cpu"


def test_xpu_and_mps_when_available(no_devices: pytest.MonkeyPatch) -> None:
    no_devices.setattr(
        torch, "xpu", types.SimpleNamespace(is_available=lambda: True), raising=False
    )
    no_devices.setattr(torch.backends.mps, "is_available", lambda: True)
    assert _common.device_for("xpu") == "xpu"
    assert _common.device_for("mps") == "mps"
    assert _common.device_for("cuda") == "cpu"


def test_unknown_platform_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown platform 'tpu'"):
        _common.device_for("tpu")


def test_pipeline_notes_the_device_it_ran_on_apart_from_the_one_asked(
    no_devices: pytest.MonkeyPatch, recorder: Any, tmp_path: Path
) -> None:
    sp.t2va(quant="bf16", steps=1, platform="cuda", workdir=str(tmp_path))
    notes = recorder.notes
    assert notes["device.asked"] == "cuda"
    assert notes["device.ran"] == "cpu"
    assert notes["dispatch.platform"] == "cpu"  # planned for the tensors it really had
