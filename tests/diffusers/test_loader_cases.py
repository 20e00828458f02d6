"""cases/diffusers/loader.toml end to end through `harness run`: every case passes against the
real diffusers module, and a q/k swap committed into a scratch copy of the loader is caught by
the exact-load case's checks (failed, with the numbers), not by luck."""

from __future__ import annotations

import inspect
import sys
from pathlib import Path
from typing import Any

import pytest
from diffcases import (
    CODE_ROOT,
    REPO,
    checks_of,
    harness_run,
    require_diffusers,
    scratch_checkout,
    suite_cases,
)

from harness.cases import load_file

require_diffusers("the diffusers scenarios need diffusers installed")

pytestmark = pytest.mark.slow

CASE = "cases/diffusers/loader.toml"
CASE_FILE = REPO / CASE


def test_case_params_bind_to_the_scenarios() -> None:
    sys.path.insert(0, str(CODE_ROOT))
    try:
        import importlib

        for case in load_file(CASE_FILE):
            module, name = (case.target or "").split(":")
            fn = getattr(importlib.import_module(module), name)
            inspect.signature(fn).bind(**case.params)
    finally:
        sys.path.remove(str(CODE_ROOT))


@pytest.mark.xdist_group("bundled-suite")
def test_every_loader_case_passes(bundled_suite: Any) -> None:
    # this file's cases as the bundled suite's one run (tests/conftest.py) ran them
    assert bundled_suite.returncode == 0, bundled_suite.output[-3000:]
    cases = suite_cases(bundled_suite, CASE_FILE)
    assert set(cases) == {c.id for c in load_file(CASE_FILE)}
    assert all(c["status"] == "passed" for c in cases.values())
    notes = cases["wan-load-comfy-exact"]["attempts"][0]["notes"]
    assert notes["loader.max_abs_diff"] == 0.0 and notes["loader.tensors_compared"] == 69
    assert "checkpoint" in cases["wan-load-comfy-exact"]["attempts"][0]["inputs"]


def test_a_q_k_swap_in_the_conversion_fails_the_exact_case(tmp_path: Path) -> None:
    checkout, package = scratch_checkout(tmp_path, CASE_FILE)
    module = package / "loader.py"
    src = module.read_text()
    needle = 'QKV_ORDER: tuple[str, ...] = ("to_q", "to_k", "to_v")'
    assert needle in src
    module.write_text(src.replace(needle, 'QKV_ORDER: tuple[str, ...] = ("to_k", "to_q", "to_v")'))
    doc = harness_run(tmp_path / "runs", CASE, "-k", "wan-load-comfy-exact", repo=checkout)
    assert doc["rc"] == 1, doc["stderr"][-3000:]
    assert {c["status"] for c in doc["cases"]} == {"failed"}
    for case in doc["cases"]:
        checks = checks_of(case)
        # The swapped q and k weights and biases of every layer differ; nothing else does.
        layers = case["attempts"][0]["notes"]["loader.num_layers"]
        assert checks["note.loader.mismatched"]["value"] == 4 * layers
        assert checks["note.loader.mismatched"]["passed"] is False
        assert checks["note.loader.max_abs_diff"]["value"] > 0
        assert checks["note.loader.max_abs_diff"]["passed"] is False
        assert checks["note.loader.first_mismatch"]["value"] == "blocks.0.attn1.to_k.bias"
        assert checks["note.loader.forward_max_abs_diff"]["passed"] is False
        # The config inference is unaffected: the checks say exactly what broke.
        assert checks["note.loader.num_layers"]["passed"] is True
        assert checks["note.loader.tensors_compared"]["passed"] is True
