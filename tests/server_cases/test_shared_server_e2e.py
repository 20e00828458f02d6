"""Several server cases share one named server through ``harness run`` (one run, a tiny real
HTTP server, a worker that pre-imports nothing): the first case pays the start-up (the stage
``server.startup``, on its attempt only), the others reuse the same process; a server that
died between cases is the next case's infrastructure error, retried on a server started
again; a case that declares the same name with another table is refused naming both cases;
the last case using the server stops it, and nothing is left running."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.report.schema import validate_report

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("server-faults")]

REPO = Path(__file__).resolve().parents[2]
FAKE = Path(__file__).with_name("fake_server.py")

CASE = """
[[case]]
id = "{id}"
kind = "server"
retries = {retries}
timeout_s = 60

[case.server]
name = "fake"
command = {command}
ready_url = "/health"
ready_timeout_s = 30
stop_timeout_s = 2

[[case.requests]]
path = "{path}"
json = {{ prompt = "x" }}
outputs.text = {{ field = "result.b64", suffix = ".txt" }}
outputs.pid = {{ field = "pid.b64", suffix = ".txt" }}
"""


def case(case_id: str, path: str = "/v1/generate", retries: int = 0, extra: str = "") -> str:
    command = json.dumps(["{python}", str(FAKE), "{port}", "ok", *([extra] if extra else [])])
    return CASE.format(id=case_id, command=command, path=path, retries=retries)


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("shared")
    (folder / "shared.toml").write_text(
        case("a-first")
        + case("b-kills-it", path="/v1/die")
        + case("c-finds-it-dead", retries=1)
        + case("c2-other-table", extra="--other")
        + case("d-last")
    )
    runner = folder / "runner.toml"
    runner.write_text('name = "cpu"\nplatform = "cpu"\nthreads = 1\npreimport = []\n')
    out = folder / "runs"
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", str(folder / "shared.toml"),
         "--runner", str(runner), "--out", str(out), "--run-id", "r", "-q"],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    doc: dict[str, Any] = json.loads((out / "r" / "report.json").read_text())
    validate_report(doc)
    doc["proc"] = proc
    doc["dir"] = out / "r"
    doc["by_id"] = {c["id"]: c for c in doc["cases"]}
    return doc


def server_pid(doc: dict[str, Any], attempt: dict[str, Any]) -> int:
    return int((doc["dir"] / attempt["outputs"]["pid"]["path"]).read_text())


def test_one_start_up_serves_the_cases_that_share_it(shared: dict[str, Any]) -> None:
    by_id = shared["by_id"]
    (a,) = by_id["a-first"]["attempts"]
    (b,) = by_id["b-kills-it"]["attempts"]
    assert (a["status"], b["status"]) == ("passed", "passed")
    assert "server.startup" in a["stages"]  # paid once, by the case that started it
    assert "server.startup" not in b["stages"]  # and not charged to the one that reused it
    assert b["notes"]["server.started_by"] == "case 'a-first' #0"
    assert a["notes"]["server.shared"] == b["notes"]["server.shared"] == "fake"
    assert server_pid(shared, a) == server_pid(shared, b)
    assert a["notes"]["server.port"] == b["notes"]["server.port"]


def test_a_server_found_dead_is_infrastructure_and_started_again(shared: dict[str, Any]) -> None:
    c = shared["by_id"]["c-finds-it-dead"]
    dead, retry = c["attempts"]
    assert dead["status"] == "error" and dead["error"]["type"] == "SharedServerDied"
    message = dead["error"]["message"]
    assert "'fake' (started by case 'a-first' #0) was found dead" in message
    assert "exit code 7" in message and "not this case's failure" in message
    assert retry["status"] == "passed" and "server.startup" in retry["stages"]
    # the retry passed; the case says what it took (any retried failure is "flaky")
    assert c["status"] == "flaky" and "SharedServerDied" in c["reason"]
    (d,) = shared["by_id"]["d-last"]["attempts"]
    assert "server.startup" not in d["stages"]
    assert server_pid(shared, d) == server_pid(shared, retry)


def test_another_table_under_the_same_name_is_refused(shared: dict[str, Any]) -> None:
    (e,) = shared["by_id"]["c2-other-table"]["attempts"]
    assert e["error"]["type"] == "SharedServerMismatch"
    assert "case 'c2-other-table'" in e["error"]["message"]
    assert "case 'c-finds-it-dead' #1 started" in e["error"]["message"]
    assert "differ in command" in e["error"]["message"]


def test_the_last_case_stops_it_and_nothing_is_left(shared: dict[str, Any]) -> None:
    (d,) = shared["by_id"]["d-last"]["attempts"]
    assert d["status"] == "passed"
    assert d["notes"]["server.exit_code"] == 0  # stopped by SIGTERM after its last user
    pid = server_pid(shared, d)
    assert not Path(f"/proc/{pid}").exists() or b"Z" in Path(f"/proc/{pid}/stat").read_bytes()
    assert shared["proc"].returncode == 1  # c2-other-table's error; the run went on
    assert os.path.isfile(shared["dir"] / "index.html")
