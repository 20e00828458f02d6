"""Server cases end to end through ``harness run``: the bundled tinyav server case passes with
its start-up stage, the server's own stages and its outputs; a server that exits during
start-up, one that answers 500 or malformed JSON, and one that leaves a process behind each
fail their attempt with what happened, and the run goes on and writes its report. A server
that never becomes ready and one whose request never gets an answer are diagnosed before the
kill (every process's rank, stack, CPU and log), in report.json, summary.md and the HTML
report; with py-spy missing from PATH (simulated) the faulthandler fallback is used and
named."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.report.detail import decode
from harness.report.schema import validate_report

# the bundled case is read from the session's one run of the whole suite; the fault
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
    """In the session's run of the whole suite (tests/conftest.py: CI's main job, `pytest
    harness/`), which runs cases/server with the rest."""
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


# Timeouts: a server stuck in its warm-up (one retry allowed: the policy must decline it, its
# log is not growing) and one whose request never gets an answer.
HANGS = """
[[case]]
id = "{id}"
kind = "server"
retries = {retries}
timeout_s = 60

[case.server]
command = {command}
ready_url = "/health"
ready_timeout_s = {ready}
request_timeout_s = 1
stop_timeout_s = 1

[[case.requests]]
path = "/v1/generate"
"""


def hung(case_id: str, mode: str, ready: float, retries: int) -> str:
    command = json.dumps(["{python}", str(FAKE), "{port}", mode])
    return HANGS.format(id=case_id, command=command, ready=ready, retries=retries)


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
        + hung("never-ready", "stuck", 1, 1)
        + hung("request-hangs", "hang", 30, 0)
    )
    pid_file = folder / "child.pid"
    # py-spy "missing" (simulated): no folder of PATH holds it, so the hang diagnoses fall
    # back to faulthandler (the py-spy path is tested on real processes in test_hang_capture)
    path = os.pathsep.join(
        d for d in os.environ.get("PATH", "").split(os.pathsep) if not Path(d, "py-spy").exists()
    )
    env = dict(os.environ, FAKE_CHILD_PID=str(pid_file), PATH=path)
    doc = harness(folder / "faults.toml", folder / "runs", env=env)
    doc["child"] = int(pid_file.read_text())
    doc["dir"] = folder / "runs" / "r"
    doc["page"] = decode((doc["dir"] / "index.html").read_text())
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
        "never-ready": "timeout",
        "request-hangs": "timeout",
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


def hang_of(doc: dict[str, Any], case_id: str) -> tuple[dict[str, Any], dict[int, Any]]:
    """The case's one attempt and its hang diagnosis's processes by rank."""
    (attempt,) = doc["by_id"][case_id]["attempts"]
    return attempt, {p["rank"]: p for p in attempt["hang"]["processes"]}


@FAULTS
def test_a_server_never_ready_is_diagnosed_before_the_kill_and_not_retried(
    faults: dict[str, Any],
) -> None:
    # one attempt although the case allows a retry: its log had stopped growing
    attempt, ranks = hang_of(faults, "never-ready")
    assert attempt["error"]["type"] == "ServerNotReady"
    assert attempt["not_retried"].startswith("not retried: the server looked stuck: no process")
    policy = "retry.readiness_timeout = once_if_logs_growing (harness default)"
    assert policy in attempt["not_retried"]
    hang = attempt["hang"]
    assert hang["trigger"] == "readiness timeout"
    assert hang["device"] == "not available here"  # the CPU platform has no device tool
    # every process of the tree: the started one (rank 0) and its child with RANK=1
    assert set(ranks) == {0, 1}, hang["processes"]
    assert ranks[1]["rank_source"] == "RANK in its environment"
    assert ranks[0]["where"].startswith("stuck_in_warmup (fake_server.py:")
    assert ranks[1]["where"].startswith("stuck_in_collective (fake_server.py:")
    assert "stuck_in_warmup" in ranks[0]["stack"]
    # the last log line is the one the hang left, not the faulthandler dump written after it
    for p in ranks.values():
        assert p["log"].endswith("server.log") and p["log_growing"] is False
        assert p["last_line"] == "warming up" and p["last_line_age_s"] >= 0
        assert p["cpu_percent"] is not None
    # the error message says where each rank was
    assert "stuck_in_warmup" in attempt["error"]["message"]
    summary = (faults["dir"] / "summary.md").read_text()
    assert "**Hang diagnosis** of `server/never-ready[cpu]` attempt #0" in summary
    assert "`stuck_in_collective (fake_server.py:" in summary
    (page,) = [c for c in faults["page"] if "hangs" in c and "stuck_in_warmup" in str(c)]
    (title, device, rows) = page["hangs"][0]
    assert title.startswith("hang diagnosis, attempt #0: readiness timeout, 2 process(es)")
    assert device == "device: not available here"
    assert {r[1] for r in rows} == {"0", "1"}


@FAULTS
def test_a_request_timeout_is_diagnosed_too(faults: dict[str, Any]) -> None:
    attempt, ranks = hang_of(faults, "request-hangs")
    assert attempt["error"]["type"] == "ServerRequestTimeout"
    assert attempt["hang"]["trigger"] == "request timeout"
    (only,) = ranks.values()
    # the handler's thread is the main one: its innermost frame is the handler's loop
    assert "stuck_in_request" in only["stack"]
    assert "not_retried" not in attempt  # the readiness policy is for readiness timeouts


@FAULTS
def test_py_spy_missing_from_path_simulated_the_faulthandler_fallback_is_used_and_named(
    faults: dict[str, Any],
) -> None:
    """The fault run's PATH leaves out every folder holding py-spy (py-spy "missing"): each
    process's stacks come from faulthandler through SIGUSR1, and the record says why."""
    for case_id in ("never-ready", "request-hangs"):
        _, ranks = hang_of(faults, case_id)
        for p in ranks.values():
            assert p["stack_method"] == "faulthandler (SIGUSR1)", p
            assert p["stack_notes"].startswith("py-spy: not on PATH"), p
