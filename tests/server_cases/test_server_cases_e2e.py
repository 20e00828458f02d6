"""Server cases end to end through ``harness run``: the bundled tinyav server case passes with
its start-up stage, the server's own stages and its outputs; a server that exits during
start-up, one that answers 500 or malformed JSON, and one that leaves a process behind each
fail their attempt with what happened, and the run goes on and writes its report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.report.schema import validate_report

# the bundled case is read from the session's one `harness run` of the whole suite; the fault
# cases share one run of their own (module fixture), so they stay on one xdist worker
pytestmark = [pytest.mark.slow]
FAULTS = pytest.mark.xdist_group("server-faults")

REPO = Path(__file__).resolve().parents[2]
FAKE = Path(__file__).with_name("fake_server.py")


def harness(*args: str | Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    """``harness run`` from the repository; its report.json, with ``proc`` added."""
    out = Path(str(args[-1]))
    argv = [*map(str, args[:-1]), "--out", str(out), "--run-id", "r", "-q"]
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
    )
    doc: dict[str, Any] = json.loads((out / "r" / "report.json").read_text())
    validate_report(doc)
    doc["proc"] = proc
    return doc


@pytest.mark.xdist_group("bundled-suite")
def test_the_bundled_server_case_passes(bundled_suite: Any) -> None:
    """In the session's `harness run` of the whole suite (tests/conftest.py), which runs
    cases/server with the rest, as CI's main job does."""
    doc = json.loads((bundled_suite.dir / "report.json").read_text())
    validate_report(doc)
    (case,) = [c for c in doc["cases"] if c["kind"] == "server"]
    assert case["id"] == "serve-tp1-int8"
    assert case["status"] == "passed", case["reason"]
    (attempt,) = case["attempts"]
    stages = attempt["stages"]
    # the harness's own (start-up, the request as the client saw it), then the server's
    assert list(stages)[:2] == ["server.startup", "server.request"]
    assert "DenoisingStage" in stages and "ExportStage" in stages
    assert stages["DenoisingStage"] < stages["server.request"]
    assert "denoise.step01" in attempt["fingerprints"]
    outputs = attempt["outputs"]
    assert (outputs["video"]["kind"], outputs["audio"]["kind"]) == ("video", "audio")
    assert outputs["video"]["nonfinite"] == 0 and outputs["audio"]["nonfinite"] == 0
    # the outputs judged as a pipeline case's: always-on finiteness, the blessed reference
    checks = {c["name"]: c["passed"] for c in attempt["checks"]}
    assert set(checks) == {
        "finite(video)",
        "finite(audio)",
        "ssim(video)",
        "psnr(video)",
        "audio_snr(audio)",
    }
    assert all(checks.values()), attempt["checks"]
    assert outputs["video"]["meta"]["fps"] == 8
    assert outputs["audio"]["meta"]["sample_rate"] == 16000
    assert attempt["notes"]["server.exit_code"] == 0  # SIGTERM: a clean stop
    assert "server.left_behind" not in attempt["notes"]
    assert (bundled_suite.dir / attempt["outputs"]["video"]["path"]).is_file()


CASES = """
[[case]]
id = "{id}"
kind = "server"
retries = 0
timeout_s = 200

[case.server]
command = {command}
ready_url = "/health"
ready_timeout_s = 120
stop_timeout_s = 1

[[case.requests]]
path = "/v1/generate"
json = {{ prompt = "x" }}
outputs.text = {{ field = "result.b64", suffix = ".txt" }}
"""


def fake(case_id: str, mode: str) -> str:
    command = json.dumps(["{python}", str(FAKE), "{port}", mode])
    return CASES.format(id=case_id, command=command)


@pytest.fixture(scope="module")
def faults(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("faults")
    boom = json.dumps(["{python}", "-c", "import sys; print('boom'); sys.exit(3)"])
    (folder / "faults.toml").write_text(
        CASES.format(id="exits", command=boom)
        + fake("answers-500", "500")
        + fake("bad-json", "badjson")
        + fake("daemon", "daemon")
        + fake("fine", "ok")
        + fake("port-taken", "taken")
    )
    pid_file = folder / "child.pid"
    env = dict(os.environ, FAKE_CHILD_PID=str(pid_file))
    doc = harness(folder / "faults.toml", folder / "runs", env=env)
    doc["child"] = int(pid_file.read_text())
    doc["by_id"] = {c["id"]: c for c in doc["cases"]}
    return doc


def error_of(faults: dict[str, Any], case_id: str) -> dict[str, Any]:
    (attempt,) = faults["by_id"][case_id]["attempts"]
    error: dict[str, Any] = attempt["error"]
    return error


@FAULTS
def test_the_run_goes_on_and_writes_its_report(faults: dict[str, Any]) -> None:
    assert faults["proc"].returncode == 1, faults["proc"].stderr[-3000:]
    status = {i: c["status"] for i, c in faults["by_id"].items()}
    assert status == {
        "exits": "failed",
        "answers-500": "failed",
        "bad-json": "failed",
        "daemon": "error",
        "fine": "passed",
        "port-taken": "failed",
    }
    (attempt,) = faults["by_id"]["fine"]["attempts"]
    assert attempt["outputs"]["text"]["bytes"] == len(b"hello from the server")
    # a server without harness.probe.request: no server-side stages, and a note says so
    assert "no perf-log line" in attempt["notes"]["server.perf_log"]


@FAULTS
def test_a_server_that_exits_during_start_up_is_reported_at_once(faults: dict[str, Any]) -> None:
    error = error_of(faults, "exits")
    # ServerExited, not ServerNotReady: the 120 s readiness limit was never waited for
    assert error["type"] == "ServerExited"
    assert "exited with exit code 3 before it was ready" in error["message"]
    assert "boom" in error["message"]


@FAULTS
def test_a_port_already_taken_is_reported_with_the_log(faults: dict[str, Any]) -> None:
    error = error_of(faults, "port-taken")
    assert error["type"] == "ServerExited" and "exit code 1" in error["message"]
    assert "Address already in use" in error["message"]


@FAULTS
def test_a_500_answer_is_quoted(faults: dict[str, Any]) -> None:
    error = error_of(faults, "answers-500")
    assert error["type"] == "ServerRequestFailed"
    assert "answered 500" in error["message"]
    assert "kaboom: the engine fell over" in error["message"]


@FAULTS
def test_malformed_json_is_quoted(faults: dict[str, Any]) -> None:
    error = error_of(faults, "bad-json")
    assert "malformed JSON" in error["message"] and '{"video": {"b64": ' in error["message"]


@FAULTS
def test_a_process_left_behind_is_reported_and_killed(faults: dict[str, Any]) -> None:
    error = error_of(faults, "daemon")
    child = faults["child"]
    # named by the harness's stop, not the worker's generic isolation check
    assert error["type"] == "ServerLeftProcesses", error
    assert f"pid {child}:" in error["message"] and "SIG_IGN" in error["message"]
    assert not Path(f"/proc/{child}").exists()
