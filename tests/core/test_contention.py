"""Latency budgets judge the code's own time: wall seconds less run-queue delay.

An overrun that only other processes' load explains (wall over the limit, wall less delay
within it) is labelled ``contention`` with its figures in every report, never failed and
never a silent pass; a real overrun still fails; a device stage keeps wall time. Attempts are
built with ``stage_wait`` directly: what the probe records is tested in test_stage_clocks.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.checks.latency import budget_checks
from harness.model import Attempt, CaseResult, CheckResult, RunReport
from harness.platforms import policy
from harness.report.detail import decode
from harness.report.github import run_annotations
from harness.report.html import render_run_html
from harness.report.junit import write_junit
from harness.report.markdown import summary_markdown
from harness.report.text import explain_checks

CPU = policy.resolve("cpu")  # budget + max(10 %, 20 ms)
STAGE = "DenoisingStage"


def attempts(wall: float, wait: float, *, n: int = 3, device: float | None = None) -> list[Attempt]:
    return [
        Attempt(
            "t2va-fp8-fnuz",
            "cpu",
            i,
            "passed",
            0,
            repeat=i,
            stages={STAGE: wall},
            stage_wait={STAGE: wait},
            stage_device={STAGE: device} if device is not None else {},
            duration_s=wall + 0.1,
            wait_s=wait,
        )
        for i in range(n)
    ]


def test_an_overrun_only_contention_explains_is_labelled_not_failed() -> None:
    # The run: median 0.874 s of wall against a 0.847 s limit (budget 0.77 s).
    [check] = budget_checks("c", {STAGE: 0.77}, attempts(0.874, 0.21), CPU)
    assert check.threshold == pytest.approx(0.847)
    assert check.passed is True and not check.blocking and check.contention
    assert check.value == pytest.approx(0.664)
    st = check.settings
    assert st["contention"] is True and st["measure"] == "wall less run-queue delay"
    assert (st["wall_s"], st["wait_s"], st["budget_s"]) == pytest.approx((0.874, 0.21, 0.77))
    assert (check.reason or "").startswith("contention: median wall 0.874 s is over the limit")
    assert [row["wall"] for row in check.details] == pytest.approx([0.874] * 3)


def test_the_whole_attempt_budget_judges_duration_less_the_attempts_delay() -> None:
    [check] = budget_checks("c", {"total": 0.9}, attempts(0.874, 0.21), None)
    assert check.contention and check.value == pytest.approx(0.974 - 0.21)


def test_a_real_overrun_still_fails_with_both_figures() -> None:
    [check] = budget_checks("c", {STAGE: 0.77}, attempts(0.874, 0.01), CPU)
    assert check.passed is False and check.blocking and not check.contention
    assert check.value == pytest.approx(0.864)
    assert "median 0.864 s (wall 0.874 s less 0.01 s of run-queue delay) over the limit" in (
        check.reason or ""
    )


def test_a_device_stage_is_judged_on_wall_time_whatever_the_host_waited() -> None:
    [check] = budget_checks("c", {STAGE: 0.77}, attempts(0.874, 0.21, device=0.5), CPU)
    assert check.passed is False and not check.contention
    assert check.settings["measure"] == "wall" and check.value == pytest.approx(0.874)


def test_a_warn_policy_overrun_under_contention_is_contention_not_a_warning() -> None:
    [check] = budget_checks("c", {STAGE: 0.77}, attempts(0.874, 0.21), policy.resolve("hip"))
    assert check.contention and check.policy == "warn" and check.passed is True


def _report(check: CheckResult) -> RunReport:
    case = CaseResult(
        "t2va-fp8-fnuz",
        "pipeline",
        "cpu",
        "passed",
        source="cases/pipeline/t2va.toml",
        checks=(check,),
        attempts=tuple(attempts(0.874, 0.21)),
    )
    return RunReport(
        "r1", "2026-12-01T00:00:00+00:00", "2026-12-01T00:01:00+00:00", (), "cpu", {}, (case,)
    )


def test_contention_is_shown_with_its_figures_in_every_report(tmp_path: Path) -> None:
    [check] = budget_checks("c", {STAGE: 0.77}, attempts(0.874, 0.21), CPU)
    report = _report(check)
    figures = "wall 0.874 s, run-queue delay 0.21 s, wall less delay 0.664 s, limit 0.847 s"

    summary = summary_markdown(report)
    assert "; 1 passed under contention" in summary.splitlines()[0]
    row = next(x for x in summary.splitlines() if "`pipeline/t2va-fp8-fnuz[cpu]`" in x)
    assert "⏱️" in row and "passed, contention" in row and "0.664 (wall 0.874)" in row

    write_junit(report, tmp_path / "junit.xml")
    junit = (tmp_path / "junit.xml").read_text()
    assert f"contention: budget({STAGE}): {figures} (budget 0.77 s)" in junit
    assert '<property name="contention" value="1" />' in junit
    assert "<failure" not in junit and "<error" not in junit

    [note] = run_annotations(report)
    assert note.level == "notice" and "passed under contention" in note.message
    assert "wall_s=0.874" in note.message

    html = render_run_html(report, tmp_path)
    assert 'class="badge s-contention">contention</span>' in html
    (case,) = decode(html)  # the checks table the page draws when the case opens
    assert [row[4] for row in case["checks"]] == ["contention"]

    text = explain_checks(report.cases[0].checks)
    assert text.startswith(f"budget({STAGE}): CONTENTION")
    assert json.loads(json.dumps(check.to_json()))["settings"]["contention"] is True
