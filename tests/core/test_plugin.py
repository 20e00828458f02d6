"""The pytest plugin, end to end with ``pytester``: items, batching, -k, -x, --junitxml, -n 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from corecases import COLDMOD, TARGETS, run_plugin, write_toy_runner

import harness

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.slow

PKG = str(Path(harness.__file__).resolve().parent)

CASES = {
    "loader.toml": """
[[case]]
id = "ok"
kind = "loader"
target = "tmod:ok"

[[case]]
id = "ok-twice"
kind = "loader"
target = "tmod:ok"
repeats = 2

[[case]]
id = "bad"
kind = "loader"
target = "tmod:bad"
""",
    "pipeline.toml": """
[[case]]
id = "flaky"
kind = "pipeline"
target = "tmod:http_once"
params = { marker = "MARKER" }
retries = 2

[[case]]
id = "cuda-only"
kind = "pipeline"
target = "tmod:ok"
platforms = ["cuda"]
""",
}


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    code = pytester.path / "code"
    code.mkdir()
    (code / "tmod.py").write_text(TARGETS)
    (code / "coldmod.py").write_text(COLDMOD)
    cases = pytester.path / "cases"
    cases.mkdir()
    write_toy_runner(pytester.path)
    pytester.makeini("[pytest]\n")
    for name, body in CASES.items():
        (cases / name).write_text(body.replace("MARKER", str(pytester.path / "marker")))
    return pytester


def reports(p: pytest.Pytester) -> list[dict]:
    runs = sorted(d for d in (p.path / "reports").iterdir() if d.is_dir() and not d.is_symlink())
    return [json.loads((d / "report.json").read_text()) for d in runs]


def test_one_item_per_case_and_platform_batched_in_one_worker(suite: pytest.Pytester) -> None:
    result = run_plugin(suite, "-v", "-rs")
    result.assert_outcomes(passed=3, failed=1, skipped=1, warnings=1)
    result.stdout.fnmatch_lines(
        [
            "*loader/bad[[]cpu[]] FAILED*",
            "*loader/ok[[]cpu[]] PASSED*",
            "*pipeline/flaky[[]cpu[]] PASSED*",
            "*loader/bad[[]cpu[]]: failed - AssertionError: one is not two*",
            "*flaky (passed only on retry): pipeline/flaky[[]cpu[]]*",
            "*SKIPPED*case declares platforms*cuda*this run targets 'cpu'*",
        ]
    )
    (doc,) = reports(suite)
    pids = {a["worker_pid"] for c in doc["cases"] for a in c["attempts"]}
    assert len(pids) == 1  # five attempts, one worker process: not one process per item
    flaky = next(c for c in doc["cases"] if c["id"] == "flaky")
    assert flaky["status"] == "flaky"


def test_keyword_exitfirst_and_junitxml(suite: pytest.Pytester) -> None:
    result = run_plugin(suite, "-k", "ok and not twice", f"--junitxml={suite.path / 'j.xml'}")
    result.assert_outcomes(passed=1)
    assert 'name="loader/ok[cpu]"' in (suite.path / "j.xml").read_text()
    (doc,) = reports(suite)
    assert [c["id"] for c in doc["cases"]] == ["ok"]  # deselected cases never ran

    result = run_plugin(suite, "-x", "-k", "loader", "--harness-out", "reports-x")
    result.assert_outcomes(failed=1)  # bad is first in order and stops the session
    result.stdout.fnmatch_lines(["*stopping after 1 failures*"])


def test_xdist_keeps_cases_batched_per_worker(suite: pytest.Pytester) -> None:
    result = run_plugin(suite, "-n", "2")
    result.assert_outcomes(passed=3, failed=1, skipped=1, warnings=1)
    every = reports(suite)
    # the controller's merge of the workers' runs: every case, `latest`
    (merged,) = [d for d in every if d.get("merged_from")]
    assert len(merged["cases"]) == 5 and not merged.get("missing")
    latest = json.loads((suite.path / "reports" / "latest" / "report.json").read_text())
    assert latest["run_id"] == merged["run_id"]
    docs = [d for d in every if not d.get("merged_from")]
    assert len(docs) in (1, 2)  # one harness run per xdist worker that got a batch
    assert sorted(m["run_id"] for m in merged["merged_from"]) == sorted(d["run_id"] for d in docs)
    for kind in ("loader", "pipeline"):
        holders = [d for d in docs if any(c["kind"] == kind for c in d["cases"])]
        assert len(holders) == 1, f"batch {kind} split across xdist workers"
    for doc in docs:
        pids = {a["worker_pid"] for c in doc["cases"] for a in c["attempts"]}
        assert len(pids) <= 1  # inside an xdist worker, one harness worker ran the batch


def test_bad_case_file_is_one_failing_item(suite: pytest.Pytester) -> None:
    (suite.path / "cases" / "zz.toml").write_text('id = "q"\nkind = "loader"\nseed = "x"\n')
    result = run_plugin(suite, "-k", "casefile or ok")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*bad case file:*zz.toml*key 'seed' = 'x'*"])


def test_loading_the_plugin_imports_no_torch() -> None:
    code = (
        "import sys, harness.pytest_plugin, harness.probe, harness.cli;"
        "assert 'torch' not in sys.modules, 'torch imported';"
        "assert 'numpy' not in sys.modules, 'numpy imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_simulated_items_say_so_and_real_only_skips_them(suite: pytest.Pytester) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: nothing is simulated for --harness-platform cuda")
    junit = suite.path / "sim.xml"
    result = run_plugin(suite, "--harness-platform", "cuda", "-k", "ok", f"--junitxml={junit}")
    result.assert_outcomes(passed=2, warnings=2)
    result.stdout.fnmatch_lines(
        [
            "*HarnessSimulatedWarning*loader/ok[[]cuda[]] passed on a SIMULATED platform*",
            "*SIMULATED (passed on a platform this machine does not have*loader/ok[[]cuda[]]*",
        ]
    )
    xml = junit.read_text()
    assert '<property name="simulated" value="true"' in xml, xml

    real_only = ("--harness-platform", "cuda", "-k", "ok", "--harness-real-only", "-rs")
    result = run_plugin(suite, *real_only)
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(["*SKIPPED*--harness-real-only: simulated: cuda is not available*"])


def test_interrupted_session_writes_interrupted_report(suite: pytest.Pytester) -> None:
    # A real SIGINT after the first item (from a plugin module) is how pytest sees Ctrl-C;
    # the harness report of that session must say interrupted.
    suite.makepyfile(
        interrupter="import os, signal\n"
        "seen = []\n"
        "def pytest_runtest_teardown(item):\n"
        "    seen.append(item)\n"
        "    if len(seen) == 1:\n"
        "        signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
    )
    result = run_plugin(suite, "-k", "loader", "-p", "interrupter")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    (doc,) = reports(suite)
    assert doc["interrupted"] is True
