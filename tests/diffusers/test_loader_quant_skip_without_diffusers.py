"""Where diffusers is not installed, the loader and quant-dispatch cases of cases/diffusers are
skipped with that reason (never passed, never absent from the report), in a real interpreter
without diffusers (``python_without_diffusers``, from this folder's conftest); with the
pipeline cases in the same run, nothing runs (exit 5) and the run says why."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import by_id, harness, report

from harness.cases import load_file

# the `python_without_diffusers` environment: built once, on one xdist worker
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("no-diffusers")]

REPO = Path(__file__).resolve().parents[2]
FILES = ("cases/diffusers/loader.toml", "cases/diffusers/quant.toml")
PIPELINE = "cases/diffusers/pipeline.toml"


def test_every_loader_and_quant_case_names_its_code_root_and_requires_diffusers() -> None:
    for f in FILES:
        for case in load_file(REPO / f):
            assert case.code_root == "targets/diffusers_scenarios", case.id
            assert case.requires == ("diffusers",), case.id


def test_they_are_skipped_with_the_reason(python_without_diffusers: str, tmp_path: Path) -> None:
    # with the pipeline cases too: a run that selects only diffusers cases runs nothing (exit 5)
    # and says why (one run for what were two, ~15 s of CI each)
    files = (*FILES, PIPELINE)
    proc = harness(
        "run", *files, "--out", str(tmp_path), "--run-id", "r", python=python_without_diffusers
    )
    assert proc.returncode == 5, proc.stderr[-3000:]  # nothing ran: every case was skipped
    assert "were skipped: requires 'diffusers'" in proc.stderr
    cases = by_id(report(tmp_path / "r"))
    assert set(cases) == {c.id for f in files for c in load_file(REPO / f)}
    for cid, case in cases.items():
        assert case["status"] == "skipped", cid
        assert "requires 'diffusers'" in case["reason"], case["reason"]
        assert not any(a["status"] == "passed" for a in case["attempts"]), cid
