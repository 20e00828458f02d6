"""Where diffusers is not installed, the diffusers cases are skipped with that reason: never
passed, never left out of the report. Run for real in an interpreter without diffusers (see
``python_without_diffusers``): the harness CLI, the report, JUnit and ``pytest harness/``."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from conftest import REPO, by_id, harness, report

# the `python_without_diffusers` environment: built once, on one xdist worker
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("no-diffusers")]

DIFFUSERS_CASES = {"diffusers-ltx2-t2va", "diffusers-wan-t2v"}


def test_that_interpreter_really_lacks_diffusers_and_has_the_rest(
    python_without_diffusers: str,
) -> None:
    probe = "import importlib.util as u; print(u.find_spec('diffusers'), u.find_spec('torch'))"
    out = subprocess.run(
        [python_without_diffusers, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out[0] == "None" and out[1] != "None"


def test_diffusers_cases_are_skipped_with_the_reason(
    python_without_diffusers: str, tmp_path: Path
) -> None:
    proc = harness(
        "run",
        "cases/diffusers/pipeline.toml",
        "cases/loader/exact.toml",
        "--out",
        str(tmp_path),
        "--run-id",
        "r",
        python=python_without_diffusers,
    )
    # The loader cases ran and passed; the skipped ones do not turn the run red or green.
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = report(tmp_path / "r")
    cases = by_id(doc)
    assert cases.keys() >= DIFFUSERS_CASES
    for cid in DIFFUSERS_CASES:
        case = cases[cid]
        assert case["status"] == "skipped", case
        assert "requires 'diffusers'" in case["reason"], case["reason"]
        assert python_without_diffusers in case["reason"]
        assert not any(a["status"] == "passed" for a in case["attempts"])
    others = [c for cid, c in cases.items() if cid not in DIFFUSERS_CASES]
    assert others and all(c["status"] == "passed" for c in others)
    junit = (tmp_path / "r" / "junit.xml").read_text()
    assert junit.count("<skipped") >= 2 and "requires 'diffusers'" in junit
    summary = (tmp_path / "r" / "summary.md").read_text()
    assert "diffusers-ltx2-t2va" in summary and "diffusers-wan-t2v" in summary


def test_pytest_harness_reports_them_as_skips(
    python_without_diffusers: str, tmp_path: Path
) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run(
        [
            python_without_diffusers,
            "-m",
            "pytest",
            "harness/",
            "-p",
            "no:xdist",
            "-p",
            "no:cacheprovider",
            "-rs",
            "-q",
            "--harness-cases",
            "cases/diffusers/pipeline.toml",
            "--harness-out",
            str(tmp_path),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "2 skipped" in proc.stdout, proc.stdout[-3000:]
    assert "requires 'diffusers'" in proc.stdout
