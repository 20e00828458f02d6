"""cases/diffusers/quant.toml end to end through `harness run`: the cases pass on the CPU, a
simulated CUDA run plans int_mm and notes that dequant_matmul ran, and a loader that ignores
``weight_scale`` (committed into a scratch copy) is caught by the numerics and exactness checks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from diffcases import (
    REPO,
    by_id,
    checks_of,
    harness_run,
    require_diffusers,
    scratch_checkout,
    suite_cases,
)

from harness.cases import load_file

require_diffusers("the diffusers scenarios need diffusers installed")

pytestmark = pytest.mark.slow

CASE = "cases/diffusers/quant.toml"
CASE_FILE = REPO / CASE


@pytest.mark.xdist_group("bundled-suite")
def test_every_quant_case_passes_on_the_cpu(bundled_suite: Any) -> None:
    # this file's cases as the bundled suite's one run (tests/conftest.py) ran them
    assert bundled_suite.returncode == 0, bundled_suite.output[-3000:]
    cases = suite_cases(bundled_suite, CASE_FILE)
    assert set(cases) == {c.id for c in load_file(CASE_FILE)}
    assert all(c["status"] == "passed" for c in cases.values())
    notes = cases["wan-int8-convrot"]["attempts"][0]["notes"]
    assert notes["dispatch.int8_mm.plan"] == notes["dispatch.int8_mm.ran"] == "dequant_matmul"
    assert notes["dispatch.platform"] == "cpu" and notes["quant.exact_layers"] == 21


def test_simulated_cuda_plans_int_mm_and_notes_the_fallback_that_ran(tmp_path: Path) -> None:
    doc = harness_run(tmp_path, CASE, "--platform", "cuda")
    assert doc["rc"] == 0, doc["stderr"][-3000:]
    cases = by_id(doc)
    case = cases["wan-int8-convrot"]
    assert case["status"] == "passed" and case["simulated"] is True
    notes = case["attempts"][0]["notes"]
    assert notes["dispatch.int8_mm.plan"] == "int_mm"  # decided for the platform
    assert notes["dispatch.int8_mm.ran"] == "dequant_matmul"  # executed on the CPU tensors
    assert notes["device.ran"] == "cpu"
    assert checks_of(case)["note.quant.rel_l2"]["threshold"] == 0.03  # the cuda bound
    # The check of what ran is a CPU fact: on another platform that case is skipped, saying so.
    assert cases["wan-int8-convrot-ran-cpu"]["status"] == "skipped"


def test_a_loader_that_ignores_weight_scale_fails_the_numerics(tmp_path: Path) -> None:
    checkout, package = scratch_checkout(tmp_path, CASE_FILE)
    module = package / "loader.py"
    src = module.read_text()
    # The bug of the seed thread: quantization metadata read, then dropped on the way into the
    # model, whose scales keep their initial 1.0.
    reading = "            t = f.get_tensor(plan.file_key(key))\n"
    strict = "    model.load_state_dict(state, strict=True)\n"
    assert reading in src and strict in src
    src = src.replace(reading, '            if key.endswith(".weight_scale"):\n'
                      "                continue\n" + reading)  # fmt: skip
    module.write_text(src.replace(strict, "    model.load_state_dict(state, strict=False)\n"))
    doc = harness_run(tmp_path / "runs", CASE, "-k", "wan-int8-convrot and not ran", repo=checkout)
    assert doc["rc"] == 1, doc["stderr"][-3000:]
    case = by_id(doc)["wan-int8-convrot"]
    assert case["status"] == "failed"
    checks = checks_of(case)
    for metric in ("note.quant.rel_l2", "note.quant.max_abs_rel", "note.quant.cosine"):
        assert checks[metric]["passed"] is False, metric
    assert checks["note.quant.rel_l2"]["value"] > 10  # not near the 0.02 bound: scales of 1
    assert checks["note.quant.exact_layers"]["value"] == 0  # no scale matches the file
    assert checks["note.quant.layers"]["passed"] is True  # the swap itself still happened
