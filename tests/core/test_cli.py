"""The ``harness`` command as a user runs it: a real subprocess, real signals, real files."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from corecases import workers_alive, write_cases

from harness.report.schema import validate_report

pytestmark = pytest.mark.slow


def harness(project: Path, *args: str, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *args],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        **kw,  # type: ignore[call-overload]
    )


def test_help_has_an_example() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "example" in out and "harness run" in out and "--budget" in out


def test_a_run_without_media_never_imports_numpy_pyav_or_torch_in_the_manager(
    project: Path,
) -> None:
    """The manager of a run whose cases write no media (the report draws none) imports none
    of numpy, PyAV, scipy and torch: numpy and PyAV alone cost ~0.45 s of CPU per `harness`
    process. The workers import what their cases need."""
    write_cases(
        project,
        "two.toml",
        '[[case]]\nid = "ok"\nkind = "loader"\ntarget = "tmod:ok"\n\n'
        '[[case]]\nid = "bad"\nkind = "loader"\ntarget = "tmod:bad"\n',
    )
    code = (
        "import atexit, runpy, sys\n"
        "heavy = ('numpy', 'av', 'scipy', 'torch')\n"
        "atexit.register(lambda: print('HEAVY', [m for m in heavy if m in sys.modules]))\n"
        "sys.argv = ['harness', 'run', 'cases', '--code-root', 'code', '--run-id', 'r', '-q']\n"
        "runpy.run_module('harness.cli', run_name='__main__')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "HEAVY []" in proc.stdout, proc.stdout
    run = project / "reports" / "r"
    assert "loader/bad[cpu]" in (run / "index.html").read_text()
    statuses = {
        c["id"]: c["status"] for c in json.loads((run / "report.json").read_text())["cases"]
    }
    assert statuses == {"ok": "passed", "bad": "failed"}


def test_bad_case_file_is_reported_and_the_rest_runs(project: Path) -> None:
    write_cases(project, "good.toml", 'id = "ok"\nkind = "loader"\ntarget = "tmod:ok"\n')
    write_cases(project, "bad.toml", 'id = "b"\nkind = "loader"\ntarget = "tmod:ok"\nrepeat = 2\n')
    proc = harness(project, "run", "cases", "--code-root", "code", "--run-id", "r1", "-q")
    assert proc.returncode == 2, proc.stderr
    assert "bad.toml" in proc.stderr and "unknown key 'repeat'" in proc.stderr
    doc = json.loads((project / "reports" / "r1" / "report.json").read_text())
    validate_report(doc)
    statuses = {c["id"]: c["status"] for c in doc["cases"]}
    assert statuses["ok"] == "passed"
    assert all(c["kind"] != "casefile" for c in doc["cases"])
    (bad,) = doc["load_errors"]
    assert bad["path"].endswith("bad.toml") and "unknown key 'repeat'" in bad["message"]
    assert (project / "reports" / "latest").resolve() == (project / "reports" / "r1").resolve()
    junit = (project / "reports" / "r1" / "junit.xml").read_text()
    assert "loader/ok[cpu]" in junit


def test_exit_codes(project: Path) -> None:
    write_cases(
        project,
        "a.toml",
        """
        [[case]]
        id = "ok"
        kind = "loader"
        target = "tmod:ok"

        [[case]]
        id = "bad"
        kind = "loader"
        target = "tmod:bad"
    """,
    )
    assert harness(project, "run", "--code-root", "code", "-q", "-k", "ok").returncode == 0
    assert harness(project, "run", "--code-root", "code", "-q").returncode == 1
    proc = harness(project, "run", "--code-root", "code", "-q", "--repeats", "0")
    assert proc.returncode == 2 and "--repeats 0" in proc.stderr
    proc = harness(project, "run", "--code-root", "code", "--runner", "nope")
    assert proc.returncode == 2 and "runner profile 'nope' not found" in proc.stderr


def test_plan_lists_items_without_running(project: Path) -> None:
    write_cases(
        project,
        "a.toml",
        """
        [[case]]
        id = "ok"
        kind = "loader"
        target = "tmod:ok"
        platforms = ["cuda"]
    """,
    )
    proc = harness(project, "plan", "--platform", "cpu", "--platform", "cuda")
    assert proc.returncode == 0, proc.stderr
    assert "loader/ok[cpu]" in proc.stdout and "skipped" in proc.stdout
    assert "loader/ok[cuda]" in proc.stdout
    assert not (project / "reports").exists()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_writes_a_valid_partial_report(project: Path, signum: signal.Signals) -> None:
    write_cases(
        project,
        "slow.toml",
        "\n".join(
            f'[[case]]\nid = "slow{i}"\nkind = "pipeline"\ntarget = "tmod:slow"\n'
            f"params = {{ seconds = 1.0 }}\n"
            for i in range(6)
        ),
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "run", "--code-root", "code", "--run-id", "int"],
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    log = project / "reports" / "int" / "attempts.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if log.exists() and log.read_text().count("\n") >= 1:
            break
        time.sleep(0.05)
    else:
        proc.kill()
        pytest.fail("no attempt finished within 60 s")
    os.kill(proc.pid, signum)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 3, err  # interrupted: never a clean exit
    doc = json.loads((project / "reports" / "int" / "report.json").read_text())
    validate_report(doc)
    assert doc["interrupted"] is True
    statuses = [c["status"] for c in doc["cases"]]
    assert statuses.count("passed") >= 1
    assert "skipped" in statuses
    skipped = [c for c in doc["cases"] if c["status"] == "skipped"]
    assert all("interrupted" in c["reason"] for c in skipped)
    assert len(doc["cases"]) == 6


def test_second_signal_keeps_earlier_attempts_and_leaves_no_fresh_worker(project: Path) -> None:
    # A fresh-process case with three repeats; the second Ctrl-C arrives while its second
    # attempt runs: the first attempt must stay in the report, and no worker may outlive us.
    # The first attempt must finish before the signals: make it short, the later ones long.
    (project / "code" / "tmod.py").write_text(
        (project / "code" / "tmod.py").read_text()
        + "\n\ndef slow_after_first(seconds=30.0, marker=''):\n"
        "    m = Path(marker)\n"
        "    if m.exists():\n"
        "        time.sleep(seconds)\n"
        "    m.write_text('x')\n"
    )
    marker = project / "first-done"
    write_cases(
        project,
        "fresh.toml",
        '[[case]]\nid = "fresh"\nkind = "import"\ntarget = "tmod:slow_after_first"\n'
        f'params = {{ seconds = 30.0, marker = "{marker}" }}\nrepeats = 3\n'
        "fresh_process = true\ntimeout_s = 120\n",
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "run", "--code-root", "code", "--run-id", "twice"],
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    workers = project / "reports" / "twice" / "workers"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        logs = sorted(workers.glob("*.log")) if workers.exists() else []
        if marker.exists() and len(logs) >= 2:
            break
        time.sleep(0.05)
    else:
        proc.kill()
        pytest.fail("the second attempt did not start within 90 s")
    time.sleep(0.5)  # let the second worker get into the attempt
    os.kill(proc.pid, signal.SIGINT)
    time.sleep(0.3)
    os.kill(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 3, err
    doc = json.loads((project / "reports" / "twice" / "report.json").read_text())
    validate_report(doc)
    (case,) = [c for c in doc["cases"] if c["id"] == "fresh"]
    assert case["status"] == "skipped" and "interrupted" in case["reason"]
    assert [a["status"] for a in case["attempts"]][:1] == ["passed"], case["attempts"]
    assert len(list(workers.glob("*.log"))) >= 2
    # Every worker process the run started is gone.
    assert not workers_alive(workers)


# --- issue #12: inputs that crashed the run, usage errors as one line, runs where nothing ran --


def one_line_usage_error(proc: subprocess.CompletedProcess[str]) -> str:
    """The single line a usage or input error prints, with exit 2 and no traceback."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def folder_state(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_values_that_crashed_the_run_are_load_errors_and_the_rest_runs(project: Path) -> None:
    case = '[[case]]\nid = "{id}"\nkind = "loader"\ntarget = "tmod:ok"\n{extra}\n'
    write_cases(project, "good.toml", case.format(id="good", extra=""))
    bad = {
        "nan.toml": ("timeout_s = nan", "key 'timeout_s' = nan"),
        "huge.toml": ("timeout_s = 1e10", "key 'timeout_s' = 10000000000.0"),
        "date.toml": ("params = { x = 1979-05-27T07:32:00Z }", "key 'params.x'"),
        "plat.toml": ('platforms = ["cpuu"]', "key 'platforms' = ['cpuu']"),
        "metric.toml": (
            'checks = [{ metric = "sssim", op = ">=", threshold = 0.9, policy = "warn" }]',
            "key 'metric' = 'sssim'",
        ),
    }
    for name, (extra, _) in bad.items():
        write_cases(project, name, case.format(id=name.removesuffix(".toml"), extra=extra))
    proc = harness(project, "run", "--code-root", "code", "--run-id", "r", "-q")
    assert proc.returncode == 2, proc.stderr
    doc = json.loads((project / "reports" / "r" / "report.json").read_text())
    validate_report(doc)
    assert [(c["id"], c["status"]) for c in doc["cases"]] == [("good", "passed")]
    assert doc["infra_errors"] == []
    errors = {Path(e["path"]).name: e["message"] for e in doc["load_errors"]}
    assert set(errors) == set(bad)
    for name, (_, expected) in bad.items():
        assert expected in errors[name] and expected in proc.stderr


def test_empty_case_array_is_an_input_error_not_an_empty_run(project: Path) -> None:
    write_cases(project, "empty.toml", "case = []\n")
    proc = harness(project, "run", "--code-root", "code", "--run-id", "r", "-q")
    assert proc.returncode == 2, proc.stderr
    assert "empty.toml: no case in file" in proc.stderr


def test_nothing_ran_exits_5_and_says_why(project: Path) -> None:
    write_cases(
        project,
        "a.toml",
        'id = "only-cuda"\nkind = "loader"\ntarget = "tmod:ok"\nplatforms = ["cuda"]\n',
    )
    proc = harness(project, "run", "--code-root", "code", "-q", "-k", "nomatch", "--run-id", "k")
    assert proc.returncode == 5, proc.stderr
    assert "nothing ran: -k 'nomatch' matched none of the 1 case(s) loaded from cases" in (
        proc.stderr
    )
    proc = harness(project, "run", "--code-root", "code", "-q", "--run-id", "s")
    assert proc.returncode == 5, proc.stderr
    assert (
        "nothing ran: all 1 selected case(s) were skipped: case declares platforms ['cuda']"
        in proc.stderr
    )
    for run in ("k", "s"):  # what such a run writes reads back
        validate_report(json.loads((project / "reports" / run / "report.json").read_text()))
        assert harness(project, "report", f"reports/{run}").returncode == 0


def test_usage_errors_are_one_line_and_touch_nothing(project: Path) -> None:
    write_cases(
        project, "a.toml", 'id = "c"\nkind = "loader"\ntarget = "tmod:ok"\nplatforms = ["cuda"]\n'
    )
    assert harness(project, "run", "--code-root", "code", "-q", "--run-id", "r1").returncode == 5
    before = folder_state(project / "reports")
    (project / "afile").write_text("not a folder")
    cases = [
        (["--out", "afile"], "--out afile: afile exists and is not a folder"),
        (["--out", "afile/sub"], "--out afile/sub: afile exists and is not a folder"),
        (["--run-id", "r1"], "--run-id r1: reports/r1 already exists"),
        (["--references", "/nonexistent"], "--references /nonexistent: that folder does not exist"),
        (["--references", "afile"], "--references afile: that folder is not a folder"),
        (["--budget", "nan"], "--budget nan: expected a finite positive number of seconds"),
        (["--budget", "inf"], "--budget inf: expected a finite positive number of seconds"),
        (["--repeats", "100000"], "--repeats 100000: expected an integer from 1 to 1000"),
        (["--retries", "11"], "--retries 11: expected an integer from 0 to 10"),
    ]
    for args, expected in cases:
        line = one_line_usage_error(harness(project, "run", "--code-root", "code", "-q", *args))
        assert expected in line, line
    assert folder_state(project / "reports") == before
    assert (project / "afile").read_text() == "not a folder"


def test_a_repeated_platform_runs_once(project: Path) -> None:
    write_cases(project, "a.toml", 'id = "c"\nkind = "loader"\ntarget = "tmod:ok"\n')
    proc = harness(project, "plan", "--platform", "cpu", "--platform", "cpu")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("loader/c[cpu]") == 1
    assert "--platform cpu given 2 times; running it once" in proc.stderr
    proc = harness(
        project, "run", "--code-root", "code", "-q", "--run-id", "r",
        "--platform", "cpu", "--platform", "cpu",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((project / "reports" / "r" / "report.json").read_text())
    assert [c["platform"] for c in doc["cases"]] == ["cpu"]
    assert len(doc["cases"][0]["attempts"]) == 1


def test_report_refuses_bad_input_and_never_rewrites_its_input(project: Path) -> None:
    write_cases(
        project, "a.toml", 'id = "c"\nkind = "loader"\ntarget = "tmod:ok"\nplatforms = ["cuda"]\n'
    )
    assert harness(project, "run", "--code-root", "code", "-q", "--run-id", "r").returncode == 5
    run = project / "reports" / "r"
    good = (run / "report.json").read_bytes()
    status = json.loads(good)
    status["cases"][0]["status"] = "green"
    extra = json.loads(good)
    extra["cases"][0]["owner"] = "someone"
    bad = [
        (b"[]", "expected a JSON object, got array"),
        (b"null", "expected a JSON object, got null"),
        (b"\x89PNG\r\n\x1a\n\x00\xff\xfe", "not UTF-8 text"),
        (json.dumps(status).encode(), "$.cases[0].status: 'green' is not one of"),
        (json.dumps(extra).encode(), "$.cases[0].owner: unknown key"),
    ]
    for content, expected in bad:
        (run / "report.json").write_bytes(content)
        before = folder_state(run)
        line = one_line_usage_error(harness(project, "report", "reports/r"))
        assert "report.json" in line and expected in line, line
        assert folder_state(run) == before
    (run / "report.json").write_bytes(good)
    (run / "summary.md").unlink()
    proc = harness(project, "report", "reports/r")
    assert proc.returncode == 0, proc.stderr
    assert (run / "report.json").read_bytes() == good
    assert "loader/c[cpu]" in (run / "summary.md").read_text()


@pytest.mark.parametrize("run_id", ["latest", "LATEST", "../x", "a/b", ".hidden"])
def test_run_ids_that_would_escape_or_shadow_latest_are_usage_errors(
    project: Path, run_id: str
) -> None:
    write_cases(project, "ok.toml", 'id = "ok"\nkind = "loader"\ntarget = "tmod:ok"\n')
    proc = harness(project, "run", "--code-root", "code", "--run-id", run_id, "-q")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "--run-id" in proc.stderr, proc.stderr
    assert not (project / "x").exists()
    reports = project / "reports"
    assert not reports.exists() or not any(
        p.is_dir() and not p.is_symlink() for p in reports.iterdir()
    )


def test_case_level_failures_say_why_in_the_reason(project: Path) -> None:
    # identical_outputs and latency budgets fail on the case, not on an attempt: the case's
    # reason must still say what failed (it was empty).
    (project / "code" / "varies.py").write_text(
        "import time\n"
        "import numpy as np\n"
        "from harness import probe\n"
        "def varies():\n"
        "    with probe.stage('work'):\n"
        "        time.sleep(0.05)\n"
        "    probe.output('t', np.array([time.time()]), kind='tensor')\n"
    )
    write_cases(
        project,
        "varies.toml",
        """
        [[case]]
        id = "varies"
        kind = "loader"
        target = "varies:varies"
        repeats = 2
        budget = { work = 0.001 }
        [[case.checks]]
        metric = "identical_outputs"
        op = "=="
        threshold = true
    """,
    )
    proc = harness(project, "run", "--code-root", "code", "--run-id", "v", "-q")
    assert proc.returncode == 1, proc.stderr
    doc = json.loads((project / "reports" / "v" / "report.json").read_text())
    (case,) = doc["cases"]
    assert case["status"] == "failed"
    assert "identical_outputs" in case["reason"] and "budget(work)" in case["reason"], case
    assert "outputs differ between attempts: t" in case["reason"]


def test_plan_that_selects_nothing_exits_5_like_run(project: Path) -> None:
    write_cases(project, "ok.toml", 'id = "ok"\nkind = "loader"\ntarget = "tmod:ok"\n')
    proc = harness(project, "plan", "-k", "nomatch")
    assert proc.returncode == 5, proc.stderr
    assert "nothing would run: -k 'nomatch' matches none of the 1 case(s)" in proc.stderr
    assert harness(project, "plan").returncode == 0
