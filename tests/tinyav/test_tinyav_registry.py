"""Quantization registry: lazy per-backend resolution, aliases, exports, custom registration."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from tinyav import quant
from tinyav.errors import RegistryError
from tinyav.scenarios import imports as import_scenarios
from tinyav.scenarios import quant as quant_scenarios

ROOT = Path(__file__).resolve().parents[2]
TARGET = ROOT / "targets" / "tinyav"


def _fresh(code: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TARGET), str(ROOT)])}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def test_import_is_lazy_in_a_fresh_interpreter() -> None:
    proc = _fresh(
        """
        import sys
        import tinyav.quant as q
        assert "tinyav.quant.convrot_int8" not in sys.modules
        assert "tinyav.quant.fp8_scaled" not in sys.modules
        assert "torch" not in sys.modules, "tinyav.quant must not import torch"
        from tinyav.quant import ConvRotInt8Config
        assert "tinyav.quant.convrot_int8" in sys.modules
        assert "tinyav.quant.fp8_scaled" not in sys.modules, "one lookup imported every backend"
        assert q.get_quantization_config("fp8").__name__ == "Fp8Config"
        assert "tinyav.quant.fp8_scaled" in sys.modules
        print("ok")
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


@pytest.mark.parametrize("first", ["tinyav.quant.fp8_scaled", "tinyav.pipeline"])
def test_no_import_cycle_whatever_is_imported_first(first: str) -> None:
    proc = _fresh(f"import {first}; import tinyav.quant as q; q.ConvRotInt8Config; q.Fp8Linear")
    assert proc.returncode == 0, proc.stderr


def test_cold_import_scenario_in_fresh_interpreter() -> None:
    proc = _fresh(
        """
        from tinyav.scenarios.imports import cold_import
        cold_import(
            "tinyav.quant",
            absent=["tinyav.quant.convrot_int8", "tinyav.quant.fp8_scaled", "torch"],
            access="kitchen_int8",
            present_after=["tinyav.quant.convrot_int8"],
            absent_after=["tinyav.quant.fp8_scaled"],
        )
        """
    )
    assert proc.returncode == 0, proc.stderr


def test_cold_import_scenario_refuses_a_warm_interpreter() -> None:
    with pytest.raises(RuntimeError, match="fresh_process"):
        import_scenarios.cold_import("tinyav.quant")


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        ("convrot_int8", "ConvRotInt8Config"),
        ("kitchen_int8", "ConvRotInt8Config"),
        ("fp8", "Fp8Config"),
    ],
)
def test_lookup_and_alias(name: str, cls: str) -> None:
    quant_scenarios.registry_lookup(name, cls)
    assert quant.get_quantization_config(name) is getattr(quant, cls)


def test_package_exports_and_dir() -> None:
    from tinyav.quant import (
        ConvRotInt8Config,
        Fp8Config,
        Fp8Linear,
        Int8ConvRotLinear,
        QuantizationConfig,
    )

    assert issubclass(ConvRotInt8Config, QuantizationConfig)
    assert issubclass(Fp8Config, QuantizationConfig)
    assert Int8ConvRotLinear.__module__ == "tinyav.quant.convrot_int8"
    assert Fp8Linear.__module__ == "tinyav.quant.fp8_scaled"
    assert "ConvRotInt8Config" in dir(quant)
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        quant.Nope  # noqa: B018


def test_custom_registration_and_errors() -> None:
    quant_scenarios.registry_custom()
    assert "tinyav_test_custom" not in quant.available_backends()
    with pytest.raises(RegistryError, match="unknown quantization backend 'x'"):
        quant.canonical_name("x")
    assert quant.available_backends() == ["convrot_int8", "fp8"]
    assert quant.backend_for_format("int8_tensorwise") == "convrot_int8"
    assert quant.backend_for_format("nvfp4") is None


def test_config_conflicts() -> None:
    cfg = quant.ConvRotInt8Config()
    assert (
        cfg.conflict({"format": "int8_tensorwise", "convrot": True, "convrot_groupsize": 256})
        is None
    )
    assert "groupsize" in (
        quant.ConvRotInt8Config(128).conflict(
            {"format": "int8_tensorwise", "convrot": True, "convrot_groupsize": 256}
        )
        or ""
    )
    assert "float8_e4m3fn" in (quant.Fp8Config().conflict({"format": "int8_tensorwise"}) or "")
    assert cfg == quant.ConvRotInt8Config(256) != quant.ConvRotInt8Config(128)


def test_building_a_model_imports_no_sympy() -> None:
    """init_dit gives its meta-device model memory without Module.to_empty, whose empty_like
    imported sympy through torch's reference implementations (0.45-1.1 s of CPU in every worker
    that built a model); the weights are what the pinned references were made from."""
    proc = _fresh(
        """
        import sys
        from tinyav.model import DiTConfig, init_dit
        model = init_dit(DiTConfig(), 3)
        assert next(model.parameters()).device.type == "cpu"
        assert not any(p.requires_grad for p in model.parameters())
        assert "sympy" not in sys.modules, "init_dit imported sympy"
        """
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
