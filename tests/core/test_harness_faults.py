"""Faults of the harness itself, and of the run around a case: an abort mid-attempt, a bug in
check evaluation or aggregation, a check that cannot run, where an error was raised."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from corecases import by_id, run_suite, workers_alive, write_cases

from harness.cases import load_suite
from harness.cases.plan import build_plan
from harness.execution.run import Runner, RunOptions
from harness.model import exit_code
from harness.platforms.profile import Profile, RetryPolicy
from harness.report.schema import validate_report

pytestmark = pytest.mark.slow


def test_abort_mid_attempt_kills_the_fresh_worker_at_once(project: Path) -> None:
    # A second Ctrl-C lands as KeyboardInterrupt while a fresh-process attempt runs: the run
    # must end that worker itself, not leave it to outlive the attempt it was started for.
    import signal
    import threading

    write_cases(
        project,
        "fresh.toml",
        """
        id = "fresh-slow"
        kind = "import"
        target = "tmod:slow"
        params = { seconds = 60.0 }
        fresh_process = true
        timeout_s = 120
    """,
    )
    suite = load_suite([project / "cases"])
    runner = Runner(
        RunOptions(
            profile=Profile(retry=RetryPolicy(retries=0)),
            out_root=project / "reports",
            code_roots=(str(project / "code"),),
            cwd=str(project),
        )
    )
    workers = runner.run_dir / "workers"

    def interrupt_when_started() -> None:
        for _ in range(600):
            if workers.exists() and any(workers.glob("*.log")):
                break
            threading.Event().wait(0.05)
        threading.Event().wait(1.0)
        os.kill(os.getpid(), signal.SIGINT)

    # A background shell may start us with SIGINT ignored: make it raise KeyboardInterrupt.
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    threading.Thread(target=interrupt_when_started, daemon=True).start()
    try:
        results = runner.run_plan(build_plan(suite.cases, ["cpu"]))
    finally:
        signal.signal(signal.SIGINT, old)
    alive = workers_alive(workers)
    assert not alive, alive
    assert runner.interrupted and results[0].status == "skipped"
    report = runner.finish()
    assert report.interrupted and not report.complete


def test_a_bug_in_check_evaluation_is_a_harness_error_not_retried_not_flaky(
    project: Path,
) -> None:
    # Plant a bug in the harness's own check evaluation inside the worker (sitecustomize runs
    # at the worker's start, before any attempt): it must never be retried into "flaky".
    (project / "code" / "sitecustomize.py").write_text(
        "import harness.worker.attempt as attempt\n"
        "def broken(*args, **kwargs):\n"
        "    raise KeyError('threshold')\n"
        "attempt.evaluate_attempt_checks = broken\n"
    )
    write_cases(
        project,
        "ok.toml",
        """
        id = "ok"
        kind = "loader"
        target = "tmod:ok"
        retries = 2
    """,
    )
    report, _ = run_suite(project, retries=2)
    case = by_id(report)["ok"]
    assert [a.status for a in case.attempts] == ["error"], case.attempts
    assert case.status == "error"
    assert case.attempts[0].error.type == "HarnessInternalError"
    assert "KeyError" in case.attempts[0].error.message
    assert report.infra_errors and not report.complete
    assert exit_code(report) == 3


def test_a_fail_policy_check_that_cannot_run_blocks_the_case(project: Path) -> None:
    (project / "code" / "frames.py").write_text(
        "import numpy as np\n"
        "from harness import probe\n"
        "def video():\n"
        "    frames = np.full((3, 8, 8, 3), 128, dtype=np.uint8)\n"
        "    probe.output('video', frames, kind='video', fps=8)\n"
    )
    write_cases(
        project,
        "clip.toml",
        """
        [[case]]
        id = "clip-must"
        kind = "pipeline"
        target = "frames:video"
        [[case.checks]]
        metric = "clip"
        output = "video"
        op = ">="
        threshold = 0.9

        [[case]]
        id = "clip-may"
        kind = "pipeline"
        target = "frames:video"
        [[case.checks]]
        metric = "clip"
        output = "video"
        op = ">="
        threshold = 0.9
        policy = "warn"
    """,
    )
    os.environ.pop("HARNESS_CLIP_MODEL", None)
    report, _ = run_suite(project, retries=1)
    must, may = by_id(report)["clip-must"], by_id(report)["clip-may"]
    assert must.status == "error", must
    assert [a.status for a in must.attempts] == ["error"]  # not retried: nothing would change
    assert "could not run" in (must.reason or "") and "CLIP" in (must.reason or "")
    assert may.status == "passed"
    (clip,) = [c for c in may.checks if c.metric == "clip"]
    assert clip.passed is None and "CLIP" in (clip.reason or "")
    assert exit_code(report) == 1


def test_a_harness_bug_in_one_item_never_loses_the_run(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A bug of the manager itself (here: aggregation raising for one case) is recorded against
    # that case, the other cases still run and are judged, and the report says incomplete.
    from harness.execution import run as run_module

    real = run_module.aggregate

    def broken(item, attempts, **kw):  # type: ignore[no-untyped-def]
        if item.case.id == "second":
            raise ZeroDivisionError("planted")
        return real(item, attempts, **kw)

    monkeypatch.setattr(run_module, "aggregate", broken)
    write_cases(
        project,
        "three.toml",
        """
        [[case]]
        id = "first"
        kind = "loader"
        target = "tmod:ok"

        [[case]]
        id = "second"
        kind = "loader"
        target = "tmod:ok"

        [[case]]
        id = "third"
        kind = "loader"
        target = "tmod:bad"
    """,
    )
    report, runner = run_suite(project)
    cases = by_id(report)
    assert cases["first"].status == "passed" and cases["third"].status == "failed"
    second = cases["second"]
    assert second.status == "error" and "harness error ZeroDivisionError" in second.reason
    assert second.attempts and second.attempts[0].status == "passed"  # the work is kept
    assert not report.complete and exit_code(report) == 3
    validate_report(json.loads((runner.run_dir / "report.json").read_text()))


def test_error_signature_names_the_innermost_frame_in_the_code_under_test(project: Path) -> None:
    (project / "code" / "deep.py").write_text(
        "def inner(n):\n"
        "    raise ValueError(f'bad shape {n}')\n"
        "def outer_a():\n"
        "    inner(3)\n"
        "def outer_b():\n"
        "    inner(4)\n"
        "def elsewhere():\n"
        "    raise ValueError('bad shape 5')\n"
    )
    write_cases(
        project,
        "deep.toml",
        """
        [[case]]
        id = "a"
        kind = "loader"
        target = "deep:outer_a"
        [[case]]
        id = "b"
        kind = "loader"
        target = "deep:outer_b"
        [[case]]
        id = "c"
        kind = "loader"
        target = "deep:elsewhere"
    """,
    )
    report, _ = run_suite(project, retries=0)
    sig = {c.id: c.attempts[0].error.signature for c in report.cases}
    assert sig["a"].startswith("ValueError@deep:inner:")
    assert sig["a"] == sig["b"]  # same failure, other numbers in the message, same place
    assert sig["c"].startswith("ValueError@deep:elsewhere:") and sig["c"] != sig["a"]
