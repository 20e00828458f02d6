"""End-to-end runner tests: real worker processes that hang, crash, exit and flake."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from corecases import by_id, run_suite, write_cases

from harness.model import exit_code
from harness.report.schema import validate_report

pytestmark = pytest.mark.slow


def test_faults_are_recorded_and_the_run_goes_on(project: Path) -> None:
    write_cases(
        project,
        "faults.toml",
        """
        [[case]]
        id = "segv"
        kind = "loader"
        target = "tmod:segv"
        retries = 0

        [[case]]
        id = "hang"
        kind = "loader"
        target = "tmod:hang"
        timeout_s = 2
        retries = 0

        [[case]]
        id = "exit3"
        kind = "loader"
        target = "tmod:exit3"
        retries = 0

        [[case]]
        id = "killed"
        kind = "loader"
        target = "tmod:sigkill"
        retries = 0

        [[case]]
        id = "z-ok-after-faults"
        kind = "loader"
        target = "tmod:ok"
        repeats = 2
    """,
    )
    report, runner = run_suite(project)
    cases = by_id(report)

    segv = cases["segv"]
    assert segv.status == "crashed"
    assert "SIGSEGV" in segv.attempts[0].error.message
    assert "in segv" in segv.attempts[0].error.traceback  # faulthandler's stack of the crash

    hang = cases["hang"]
    assert hang.status == "timeout"
    assert hang.attempts[0].duration_s >= 2.0
    # The stack captured before the kill shows where it hung.
    assert "in hang" in hang.attempts[0].error.traceback
    assert "tmod.py" in hang.attempts[0].error.traceback

    exit3 = cases["exit3"]
    assert exit3.status == "crashed"
    assert "exited with code 3" in exit3.attempts[0].error.message

    killed = cases["killed"]
    assert killed.status == "crashed"
    assert "SIGKILL" in killed.attempts[0].error.message

    ok = cases["z-ok-after-faults"]
    assert ok.status == "passed"
    assert len(ok.attempts) == 2
    # Both measured attempts ran in one persistent worker, replaced after the crashes.
    pids = {a.worker_pid for a in ok.attempts}
    assert len(pids) == 1
    assert pids.isdisjoint({c.attempts[0].worker_pid for c in (segv, exit3, killed, hang)})
    assert ok.attempts[0].stages["work"] >= 0
    assert ok.attempts[0].fingerprints["a"]["shape"] == [4, 4]
    assert ok.attempts[0].inputs["x"].startswith(("blake3:", "sha256:"))

    assert exit_code(report) == 1
    run_dir = runner.run_dir
    lines = (run_dir / "attempts.jsonl").read_text().splitlines()
    assert len(lines) == 6  # every attempt streamed to the write-ahead log
    doc = json.loads((run_dir / "report.json").read_text())
    validate_report(doc)


def test_infrastructure_error_then_pass_is_flaky_not_passed(project: Path) -> None:
    marker = project / "marker"
    write_cases(
        project,
        "flaky.toml",
        f"""
        id = "http-once"
        kind = "pipeline"
        target = "tmod:http_once"
        params = {{ marker = "{marker}" }}
        retries = 2
    """,
    )
    report, _runner = run_suite(project)
    case = by_id(report)["http-once"]
    assert case.status == "flaky"
    assert [a.status for a in case.attempts] == ["error", "passed"]
    assert case.attempts[0].error.type == "HTTPError"
    assert "passed only after 1 failed attempt(s); first: HTTPError" in (case.reason or "")
    assert exit_code(report) == 7


def test_failed_assertion_is_never_retried(project: Path) -> None:
    write_cases(
        project,
        "bad.toml",
        """
        id = "bad"
        kind = "loader"
        target = "tmod:bad"
        retries = 3
    """,
    )
    report, _ = run_suite(project)
    case = by_id(report)["bad"]
    assert case.status == "failed"
    assert len(case.attempts) == 1


def test_retry_that_does_not_fit_the_budget_is_declined(project: Path) -> None:
    write_cases(
        project,
        "budget.toml",
        """
        id = "http-slow"
        kind = "pipeline"
        target = "tmod:http_always"
        params = { sleep = 1.5 }
        retries = 3
    """,
    )
    # Worker start-up (torch import) is not counted in an attempt, but it is in the budget:
    # a 1.5 s failure leaves too little of a 2.5 s budget for a second 1.5 s try.
    report, _ = run_suite(project, budget=2.5)
    case = by_id(report)["http-slow"]
    statuses = [a.status for a in case.attempts]
    assert statuses[-1] == "budget_declined", statuses
    declined = case.attempts[-1]
    assert declined.metrics["seconds_estimated"] >= 1.5
    assert declined.metrics["seconds_left"] < declined.metrics["seconds_estimated"]
    assert "estimated" in declined.error.message and "left" in declined.error.message
    assert case.status == "error"


def test_cold_import_case_gets_a_fresh_interpreter_each_attempt(project: Path) -> None:
    write_cases(
        project,
        "cold.toml",
        """
        [[case]]
        id = "a-warm"
        kind = "loader"
        target = "tmod:ok"

        [[case]]
        id = "cold"
        kind = "import"
        target = "tmod:cold"
        fresh_process = true
        repeats = 2
    """,
    )
    report, _ = run_suite(project)
    cases = by_id(report)
    cold = cases["cold"]
    assert cold.status == "passed", cold.reason
    pids = [a.notes["pid"] for a in cold.attempts]
    assert len(set(pids)) == 2
    assert cases["a-warm"].attempts[0].notes["pid"] not in pids
    assert all(a.fresh_process for a in cold.attempts)


def test_a_fresh_process_case_starts_without_numpy_or_pyav(project: Path) -> None:
    """The harness's quality checks (numpy, PyAV) are loaded in a fresh-process worker only for
    a case that checks outputs: a cold-import case can catch a target importing numpy eagerly."""
    write_cases(
        project,
        "bare.toml",
        """
        [[case]]
        id = "no-numpy"
        kind = "import"
        target = "tmod:cold"
        params = { module = "numpy" }
        fresh_process = true

        [[case]]
        id = "no-av"
        kind = "import"
        target = "tmod:cold"
        params = { module = "av" }
        fresh_process = true
    """,
    )
    report, _ = run_suite(project)
    cases = by_id(report)
    assert set(cases) == {"no-numpy", "no-av"}
    for case in cases.values():
        assert case.status == "passed", (case.id, case.reason)
        assert all(a.fresh_process for a in case.attempts)


def test_nan_output_fails_and_names_the_output(project: Path) -> None:
    write_cases(
        project,
        "nan.toml",
        """
        id = "nan-audio"
        kind = "pipeline"
        target = "tmod:nan_output"
    """,
    )
    report, _ = run_suite(project)
    case = by_id(report)["nan-audio"]
    assert case.status == "failed"
    finite = next(c for c in case.checks if c.name == "finite(audio)")
    assert finite.passed is False and finite.value == 1
    assert "audio" in finite.reason


def test_out_of_memory_is_retried(project: Path) -> None:
    write_cases(
        project,
        "oom.toml",
        f"""
        id = "oom-once"
        kind = "pipeline"
        target = "tmod:oom_once"
        params = {{ marker = "{project / "oom-marker"}" }}
    """,
    )
    report, _ = run_suite(project, retries=1)
    case = by_id(report)["oom-once"]
    assert [a.status for a in case.attempts] == ["error", "passed"]
    first = case.attempts[0].error
    assert first is not None and first.type == "MemoryError", first
    assert case.status == "flaky"


def write_sigkill_case(project: Path) -> None:
    write_cases(project, "kill.toml", 'id = "killed"\nkind = "loader"\ntarget = "tmod:sigkill"\n')


def test_sigkill_without_oom_evidence_is_a_crash_not_retried(project: Path) -> None:
    write_sigkill_case(project)
    report, _ = run_suite(project, retries=2)
    case = by_id(report)["killed"]
    assert [a.status for a in case.attempts] == ["crashed"]
    assert case.status == "crashed" and "SIGKILL" in (case.reason or "")


def test_sigkill_with_oom_counter_rise_is_oom_with_fake_cgroup_counter(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No cgroup OOM kill can be provoked safely here: the counter is faked, the SIGKILL is real.
    from harness.execution import executor

    counts = iter(range(100))
    monkeypatch.setattr(executor, "oom_kill_count", lambda: next(counts))
    write_sigkill_case(project)
    report, _ = run_suite(project, retries=1)
    case = by_id(report)["killed"]
    assert [a.status for a in case.attempts] == ["crashed", "crashed"]
    assert "oom_kill counter rose" in case.attempts[0].error.message


def test_kernel_fault_is_a_failure_never_retried(project: Path) -> None:
    write_cases(
        project,
        "fault.toml",
        """
        id = "fault"
        kind = "quant"
        target = "tmod:kernel_fault"
    """,
    )
    report, _ = run_suite(project, retries=2)
    case = by_id(report)["fault"]
    assert [a.status for a in case.attempts] == ["error"]
    assert case.status == "error"


def test_platform_absent_here_is_labelled_simulated(project: Path) -> None:
    write_cases(
        project,
        "any.toml",
        """
        id = "ok"
        kind = "loader"
        target = "tmod:ok"
    """,
    )
    report, _ = run_suite(project, platforms=("cpu", "cuda"))
    results = {c.platform: c for c in report.cases}
    assert results["cpu"].simulated is False and results["cpu"].reason is None
    cuda = results["cuda"]
    assert cuda.status == "passed"
    # Simulated exactly when this machine has no CUDA (a ROCm build's "cuda" is HIP): then it is
    # never reported as a real CUDA pass. The target records only numpy arrays, which say
    # nothing about a device, so availability alone decides.
    has_cuda = torch.cuda.is_available() and not torch.version.hip
    assert cuda.simulated is (not has_cuda)
    if has_cuda:
        assert cuda.reason is None
    else:
        assert "simulated: cuda is not available here" in (cuda.reason or "")


def test_command_cases_run_as_subprocesses(project: Path) -> None:
    (project / "code" / "writer.py").write_text(
        "import json, os\n"
        "with open(os.environ['HARNESS_RESULT_FILE'], 'w') as f:\n"
        "    json.dump({'notes': {'pid': os.getpid()}}, f)\n"
    )
    write_cases(
        project,
        "cmd.toml",
        """
        [[case]]
        id = "cmd-ok"
        kind = "import"
        command = ["python", "code/writer.py"]

        [[case]]
        id = "cmd-fails"
        kind = "import"
        command = ["python", "-c", "import sys; print('boom'); sys.exit(4)"]
    """,
    )
    report, _ = run_suite(project)
    cases = by_id(report)
    ok = cases["cmd-ok"]
    assert ok.status == "passed", ok.reason
    assert ok.attempts[0].notes["pid"] != ok.attempts[0].worker_pid
    bad = cases["cmd-fails"]
    assert bad.status == "failed"
    assert "exited 4" in bad.attempts[0].error.message and "boom" in bad.attempts[0].error.message


def test_command_case_that_times_out_is_timeout_not_error(project: Path) -> None:
    write_cases(
        project,
        "cmd.toml",
        """
        id = "cmd-hangs"
        kind = "import"
        command = ["python", "-c", "import time; print('waiting', flush=True); time.sleep(60)"]
        timeout_s = 3
        retries = 0
    """,
    )
    report, _ = run_suite(project, retries=0)
    case = by_id(report)["cmd-hangs"]
    assert [a.status for a in case.attempts] == ["timeout"], case.attempts
    assert case.status == "timeout"


def test_attempts_sent_ahead_are_recorded_against_their_own_case(project: Path) -> None:
    """The next attempt goes to the worker while the manager records the last one
    (harness.execution.inflight): a crash or a hang in it is that attempt's, in plan order."""
    write_cases(
        project,
        "ahead.toml",
        """
        [[case]]
        id = "a1-ok"
        kind = "loader"
        target = "tmod:ok"
        repeats = 2

        [[case]]
        id = "a2-segv"
        kind = "loader"
        target = "tmod:segv"
        retries = 0

        [[case]]
        id = "a3-ok"
        kind = "loader"
        target = "tmod:ok"

        [[case]]
        id = "a4-hang"
        kind = "loader"
        target = "tmod:hang"
        timeout_s = 2
        retries = 0

        [[case]]
        id = "a5-ok"
        kind = "loader"
        target = "tmod:ok"
    """,
    )
    report, runner = run_suite(project)
    cases = by_id(report)
    # sent ahead: a1's second run, a2 (after a1 passed), a4 (after a3); never after a failure
    assert runner.executor.sent_ahead == 3
    assert not report.infra_errors
    a1, segv, hang = cases["a1-ok"], cases["a2-segv"], cases["a4-hang"]
    assert a1.status == "passed" and len(a1.attempts) == 2
    assert segv.status == "crashed" and "SIGSEGV" in segv.attempts[0].error.message
    assert "in segv" in segv.attempts[0].error.traceback
    assert segv.attempts[0].worker_pid == a1.attempts[1].worker_pid  # it ran in a1's worker
    assert hang.status == "timeout" and hang.attempts[0].duration_s >= 2.0
    assert "in hang" in hang.attempts[0].error.traceback
    assert cases["a3-ok"].status == cases["a5-ok"].status == "passed"
    journal = [
        json.loads(line) for line in (runner.run_dir / "attempts.jsonl").read_text().splitlines()
    ]
    assert [(a["case_id"], a["index"]) for a in journal] == [
        ("a1-ok", 0),
        ("a1-ok", 1),
        ("a2-segv", 0),
        ("a3-ok", 0),
        ("a4-hang", 0),
        ("a5-ok", 0),
    ]
