"""The tinyav case suite: every case file validates, names a real scenario with bindable params,
and every scenario passes its declared ``note.*`` checks when run here (fresh-process cases as
the session's run of the whole suite ran them, each in a fresh interpreter)."""

from __future__ import annotations

import importlib
import inspect
import math
import re
from pathlib import Path
from typing import Any

import pytest

from harness import probe
from harness.cases import load_file
from harness.model import Case
from harness.report.io import read_report

ROOT = Path(__file__).resolve().parents[2]
CASE_FILES = sorted((ROOT / "cases").glob("*/*.toml"))
CASES = [c for f in CASE_FILES for c in load_file(f) if (c.target or "").startswith("tinyav.")]


def _fn(case: Case) -> Any:
    module, name = (case.target or "").split(":")
    return getattr(importlib.import_module(module), name)


def test_ids_unique_and_kinds_match_folders() -> None:
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))
    assert len(CASES) >= 40
    for c in CASES:
        folder = Path(c.source).parent.name
        assert (
            c.kind == folder
            or (c.kind == "import" and folder == "quant")
            or (c.ranks > 1 and folder == "multirank" and c.kind in ("pipeline", "quant"))
        ), c.id
        assert c.fresh_process == (c.kind == "import"), c.id


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_params_bind(case: Case) -> None:
    inspect.signature(_fn(case)).bind(**case.params)


def _note_checks(case: Case, notes: dict[str, Any]) -> None:
    for spec in case.checks:
        if not spec.metric.startswith("note."):
            continue
        key = spec.metric.removeprefix("note.")
        want = spec.threshold_for(("cpu", "any"))
        assert key in notes, f"{case.id}: note {key!r} not reported"
        assert spec.op == "==" and notes[key] == want, (
            f"{case.id}: {key}={notes[key]!r}, want {want!r}"
        )


# a multi-rank case's notes are its ranks' (rank 0 holds a TP shard): it runs in its ranks, in
# the bundled suite (tests/e2e) and tests/multirank, not called here in one process
@pytest.mark.parametrize(
    "case", [c for c in CASES if not c.fresh_process and c.ranks == 1], ids=lambda c: c.id
)
def test_case_passes_here(case: Case, tmp_path: Path) -> None:
    rec = probe._begin(seed=case.seed, platform="cpu", output_dir=tmp_path / "out")
    try:
        _fn(case)(**case.params)
    finally:
        probe._end()
    _note_checks(case, rec.notes)
    for name, out in rec.outputs.items():
        assert out["nonfinite"] == 0, f"{case.id}: output {name} has non-finite values"


@pytest.mark.slow
@pytest.mark.xdist_group("bundled-suite")
def test_fresh_process_cases_pass(bundled_suite: Any) -> None:
    """All cold-import cases, each in its own fresh interpreter, as the session's run of the
    whole suite ran them (``bundled_suite``, tests/conftest.py: the worker starts a bare
    interpreter per attempt, imports the case's target there and calls it). Their notes are
    checked here against the case files (running them again in interpreters of this test's
    own cost ~4 s of CI, each importing torch, for the same calls)."""
    assert bundled_suite.returncode in (0, 1), bundled_suite.output[-3000:]
    report = read_report(bundled_suite.dir / "report.json")
    ran = {c.id: c for c in report.cases if c.platform == "cpu"}
    fresh = [c for c in CASES if c.fresh_process]
    assert len(fresh) >= 6
    for case in fresh:
        assert case.id in ran, f"{case.id}: not in the bundled suite's run"
        result = ran[case.id]
        assert result.status == "passed", f"{case.id}: {result.reason}"
        assert result.attempts and all(a.fresh_process for a in result.attempts), case.id
        for attempt in result.attempts:
            _note_checks(case, attempt.notes)


# Stages the pipeline scenarios record (tinyav.pipeline and tinyav.scenarios.pipeline).
PIPELINE_STAGES = {
    "CheckpointWrite",
    "LoadStage",
    "InputValidationStage",
    "TextEncodingStage",
    "LatentPreparationStage",
    "DenoisingStage",
    "VideoDecodingStage",
    "AudioDecodingStage",
    "ExportStage",
}


def test_latency_budgets_live_in_the_cpu_runner_profile() -> None:
    """No case carries its own (65x loose) budget; the cpu profile budgets every pipeline case,
    by a real case id and a stage the pipeline records, by the rule it states: 5x the idle
    median in the table's comment, at least 0.15 s, rounded up to 2 significant digits."""
    from harness.platforms.profile import resolve_profile

    assert all(not c.budget for c in CASES), [c.id for c in CASES if c.budget]
    budgets = resolve_profile("cpu", ROOT / "runners").budgets
    # a multi-rank case is compared, not budgeted: its stage times are rank 0's under gloo, a
    # budget for them is not sized yet
    pipeline_ids = {c.id for c in CASES if c.kind == "pipeline" and c.ranks == 1}
    assert set(budgets) == pipeline_ids
    for case_id, stages in budgets.items():
        assert "DenoisingStage" in stages, case_id
        assert set(stages) <= PIPELINE_STAGES, case_id
        assert all(secs >= 0.15 for secs in stages.values()), (case_id, stages)
    text = (ROOT / "runners" / "cpu.toml").read_text(encoding="utf-8")
    sized = re.findall(
        r"\[budgets\.([\w-]+)\]  # medians \(ms\): Denoising (\d+), Export (\d+)", text
    )
    assert {case_id for case_id, _, _ in sized} == set(budgets)
    for case_id, denoising, export in sized:
        for stage, ms in (("DenoisingStage", denoising), ("ExportStage", export)):
            want = max(5 * int(ms) / 1000, 0.15)
            unit = 10.0 ** (math.floor(math.log10(want)) - 1)
            rounded = math.ceil(want / unit - 1e-9) * unit
            assert budgets[case_id][stage] == pytest.approx(rounded), (case_id, stage, ms)
