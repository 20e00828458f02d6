"""GitHub Actions end to end: real `harness run`, `harness compare` and `pytest harness/`
subprocesses over a real tinyav case with a wrong threshold, with GITHUB_ACTIONS,
GITHUB_STEP_SUMMARY and GITHUB_WORKSPACE set as a runner sets them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import harness

REPO = Path(harness.__file__).resolve().parent.parent
pytestmark = pytest.mark.slow

CASES = """\
# two loader cases of the bundled target; the second one's threshold is wrong
[[case]]
id = "load-bf16-ok"
kind = "loader"
target = "tinyav.scenarios.loader:load_exact"
params = {{ fmt = "bf16", variant = "full" }}
timeout_s = 120
[[case.checks]]
metric = "note.checkpoint.format"
op = "=="
threshold = "bf16"

[[case]]
id = "load-bf16-wrong"
kind = "loader"
target = "tinyav.scenarios.loader:load_exact"
params = {{ fmt = "bf16", variant = "full" }}
timeout_s = 120
[[case.checks]]
metric = "note.loader.quantized_layers"
op = "=="
threshold = {threshold}
"""
WRONG_LINE = 13  # the [[case]] line of load-bf16-wrong above


def _project(tmp_path: Path, threshold: int = 27) -> Path:
    (tmp_path / "cases").mkdir(exist_ok=True)
    (tmp_path / "cases" / "bad.toml").write_text(CASES.format(threshold=threshold))
    assert CASES.splitlines()[WRONG_LINE - 1] == "[[case]]"
    return tmp_path


def _env(project: Path, summary: Path | None, actions: bool = True) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    env["PYTHONPATH"] = str(REPO)
    env["GITHUB_WORKSPACE"] = str(project)
    if actions:
        env["GITHUB_ACTIONS"] = "true"
    if summary is not None:
        env["GITHUB_STEP_SUMMARY"] = str(summary)
    return env


def _harness(project: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _run(project: Path, env: dict[str, str], run_id: str) -> subprocess.CompletedProcess[str]:
    code_root = str(REPO / "targets" / "tinyav")
    return _harness(project, env, "run", "-q", "--code-root", code_root, "--run-id", run_id)


def _annotations(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("::")]


def test_harness_run_annotates_the_failing_case_table_and_appends_the_summary(
    tmp_path: Path,
) -> None:
    project = _project(tmp_path)
    summary = tmp_path / "step-summary.md"
    summary.write_text("## an earlier step\n")
    proc = _run(project, _env(project, summary), "r1")
    assert proc.returncode == 1, proc.stderr
    (error,) = _annotations(proc.stdout)
    assert error.startswith(
        f"::error file=cases/bad.toml,line={WRONG_LINE},title=loader/load-bf16-wrong[cpu]::"
        "failed: note.loader.quantized_layers obtained 0, required == 27%0A"
    ), error
    text = summary.read_text()
    own = (project / "reports" / "r1" / "summary.md").read_text()
    assert text == "## an earlier step\n\n" + own
    assert own.startswith("### ❌ 1 failed, 1 passed on cpu in ")
    assert (
        "| ❌ | `loader/load-bf16-wrong[cpu]` | failed | `note.loader.quantized_layers` | 0 |"
        in own
    )
    # a second run in the same step appends after the first
    assert _run(project, _env(project, summary), "r2").returncode == 1
    assert summary.read_text().startswith(text) and summary.read_text().count("### ❌") == 2


def test_without_github_actions_only_the_summary_is_appended(tmp_path: Path) -> None:
    project = _project(tmp_path)
    summary = tmp_path / "step-summary.md"
    proc = _run(project, _env(project, summary, actions=False), "r1")
    assert proc.returncode == 1 and _annotations(proc.stdout) == []
    assert summary.read_text().startswith("### ❌ 1 failed")


def test_a_summary_that_cannot_be_written_loses_nothing(tmp_path: Path) -> None:
    project = _project(tmp_path)
    proc = _run(project, _env(project, tmp_path / "cases"), "r1")  # a folder, not a file
    assert proc.returncode == 1
    assert f"warning: GITHUB_STEP_SUMMARY {tmp_path / 'cases'}: cannot append" in proc.stderr
    report = json.loads((project / "reports" / "r1" / "report.json").read_text())
    assert {c["id"]: c["status"] for c in report["cases"]} == {
        "load-bf16-ok": "passed",
        "load-bf16-wrong": "failed",
    }
    assert len(_annotations(proc.stdout)) == 1


def test_harness_compare_of_saved_runs_annotates_the_new_failure(tmp_path: Path) -> None:
    project = _project(tmp_path, threshold=0)
    quiet = _env(project, None, actions=False)
    assert _run(project, quiet, "base").returncode == 0
    _project(tmp_path, threshold=27)
    assert _run(project, quiet, "head").returncode == 1
    summary = tmp_path / "step-summary.md"
    proc = _harness(
        project, _env(project, summary), "compare", "reports/base", "reports/head", "--id", "c1"
    )
    assert proc.returncode == 1, proc.stderr
    (error,) = _annotations(proc.stdout)
    assert error.startswith(
        f"::error file=cases/bad.toml,line={WRONG_LINE},title=loader/load-bf16-wrong[cpu]::"
        "loader/load-bf16-wrong[cpu]: new_failure"
    ), error
    text = summary.read_text()
    assert text == (project / "reports" / "c1" / "summary.md").read_text()
    # one run a side: the passing case cannot be judged for latency, so it is inconclusive
    assert text.startswith("### ❌ 1 new failure, 1 inconclusive: head `head` vs base `base`")
    assert text.index("`loader/load-bf16-wrong[cpu]`") < text.index("`loader/load-bf16-ok[cpu]`")


@pytest.mark.parametrize("xdist", [False, True], ids=["serial", "xdist"])
def test_pytest_harness_annotates_and_appends_the_summary(tmp_path: Path, xdist: bool) -> None:
    project = _project(tmp_path)
    summary = tmp_path / "step-summary.md"
    summary.write_text("## before\n")
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", str(REPO / "harness"), "-q"),
            *("-p", "no:cacheprovider", f"--rootdir={project}"),
            *("--harness-cases", "cases", "--harness-out", "reports"),
            *("--harness-code-root", str(REPO / "targets" / "tinyav")),
            *(("-n", "2") if xdist else ("-p", "no:xdist")),
        ],
        cwd=project,
        env=_env(project, summary),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1, proc.stdout[-3000:]
    (error,) = _annotations(proc.stdout)
    assert error.startswith(
        f"::error file=cases/bad.toml,line={WRONG_LINE},title=loader/load-bf16-wrong[cpu]::failed"
    ), error
    text = summary.read_text()
    assert text.startswith("## before\n\n### ❌ 1 failed, 1 passed on cpu")
    # one summary: the run's (under xdist, the controller's merge of the workers' runs)
    run_dir = (project / "reports" / "latest").resolve()
    assert text == "## before\n\n" + (run_dir / "summary.md").read_text()
