"""Tests for harness.junit: JUnit XML parsed back with ElementTree."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from harness.model import Attempt, CaseResult, CheckResult, ErrorInfo, RunReport
from harness.report.junit import write_junit, xml_safe

_TB = 'Traceback (most recent call last):\n  File "tinyav/x.py", line 3\nRuntimeError: boom'


def _attempt(case_id: str, index: int, status: str, **kw: object) -> Attempt:
    base: dict[str, object] = {"seed": 7, "duration_s": 0.5, "stages": {"denoise": 0.25}}
    base.update(kw)
    return Attempt(case_id, "cpu", index, status, **base)  # type: ignore[arg-type]


def _ssim_fail() -> CheckResult:
    return CheckResult(
        name="ssim-video",
        metric="ssim",
        value=0.8,
        op=">=",
        threshold=0.95,
        policy="fail",
        passed=False,
        output="video",
        settings={"win_size": 7},
        details=(
            {"frame": "first", "obtained": 0.99, "threshold": 0.95},
            {"frame": "mid", "obtained": 0.8, "threshold": 0.95},
        ),
    )


def _err(t: str, msg: str) -> ErrorInfo:
    return ErrorInfo(t, msg, f"{t}:sig", _TB)


def _report() -> RunReport:
    bad = 'ctl\x00\x07\x1b[31m chars \ud800 & <tag> "q"'
    ok_check = CheckResult("finite", "finite", 1.0, "==", 1.0, "fail", True)
    warn = CheckResult("clip", "clip", 0.2, ">=", 0.3, "warn", False)
    notrun = CheckResult("psnr", "psnr", None, ">=", 30.0, "fail", None, reason="no reference")
    cases = (
        CaseResult(
            "load-bf16",
            "loader",
            "cpu",
            "passed",
            seed=1,
            repeats=2,
            checks=(ok_check, warn, notrun),
            attempts=(
                _attempt("load-bf16", 0, "passed", warmup=True, stages={"load": 9.0}),
                _attempt("load-bf16", 1, "passed", stages={"load": 0.1}),
                _attempt("load-bf16", 2, "passed", repeat=1, stages={"load": 0.3}),
            ),
        ),
        CaseResult(
            "t2va",
            "pipeline",
            "cpu",
            "failed",
            seed=3,
            checks=(_ssim_fail(),),
            attempts=(
                _attempt("t2va", 0, "failed", checks=(_ssim_fail(),)),
                _attempt("t2va", 1, "failed", retry=1, checks=(_ssim_fail(),)),
            ),
        ),
        CaseResult(
            "int8",
            "quant",
            "cuda",
            "error",
            simulated=True,
            attempts=(_attempt("int8", 0, "error", error=_err("RuntimeError", bad)),),
        ),
        CaseResult(
            "slow",
            "pipeline",
            "cpu",
            "timeout",
            attempts=(_attempt("slow", 0, "timeout", error=_err("Timeout", "exceeded 30 s")),),
        ),
        CaseResult(
            "segv",
            "quant",
            "cpu",
            "crashed",
            attempts=(
                _attempt("segv", 0, "crashed", error=_err("WorkerCrashed", "signal 11 (SIGSEGV)")),
            ),
        ),
        CaseResult("npu-only", "loader", "cpu", "skipped", reason="needs platform npu"),
        CaseResult(
            "wobbly",
            "pipeline",
            "cpu",
            "flaky",
            attempts=(
                _attempt("wobbly", 0, "failed", checks=(_ssim_fail(),)),
                _attempt("wobbly", 1, "error", retry=1, error=_err("OSError", "disk hiccup")),
                _attempt("wobbly", 2, "passed", retry=2),
            ),
        ),
        CaseResult(
            "huge", "pipeline", "cpu", "budget_declined", reason="needs ~400 s, 12 s left in budget"
        ),
    )
    return RunReport(
        "run-1",
        "2026-01-01T00:00:00Z",
        "2026-01-01T00:01:00Z",
        ("harness", "run"),
        "cpu",
        {"git": {"sha": "abc", "dirty": False}},
        cases,
    )


@pytest.fixture
def suite(tmp_path: Path) -> ET.Element:
    out = tmp_path / "out" / "junit.xml"
    write_junit(_report(), out)
    assert [p.name for p in out.parent.iterdir()] == ["junit.xml"]  # no temp file left
    return ET.parse(out).getroot()


def _case(suite: ET.Element, name: str) -> ET.Element:
    found = [tc for tc in suite.iter("testcase") if tc.get("name") == name]
    assert len(found) == 1, name
    return found[0]


def _props(el: ET.Element) -> dict[str, str]:
    props = el.find("properties")
    assert props is not None
    return {p.get("name", ""): p.get("value", "") for p in props.iter("property")}


def _children(tc: ET.Element) -> list[str]:
    return [c.tag for c in tc if c.tag not in ("properties", "system-out")]


def test_suite_counts(suite: ET.Element) -> None:
    assert suite.tag == "testsuite" and suite.get("name") == "harness"
    assert suite.get("tests") == "8"
    assert suite.get("failures") == "2"  # failed + budget_declined
    assert suite.get("errors") == "3"  # error + timeout + crashed
    assert suite.get("skipped") == "1"
    assert float(suite.get("time", "")) == pytest.approx(0.5 * 11)  # 11 attempts of 0.5 s
    assert _props(suite)["run_id"] == "run-1"
    assert _props(suite)["git.sha"] == "abc"


def test_passed_case_properties(suite: ET.Element) -> None:
    tc = _case(suite, "loader/load-bf16[cpu]")
    assert tc.get("classname") == "loader"
    assert _children(tc) == []
    props = _props(tc)
    assert props["seed"] == "1" and props["repeats"] == "2"
    assert props["platform"] == "cpu" and props["simulated"] == "false"
    assert props["status"] == "passed"
    # Median over the measured attempts only; the warmup's 9 s is left out.
    assert float(props["stage.load"]) == pytest.approx(0.2)
    out = tc.find("system-out")
    assert out is not None and out.text is not None
    assert "warning: clip" in out.text and "not run: psnr: no reference" in out.text


def test_failed_case_has_check_table_and_reruns(suite: ET.Element) -> None:
    tc = _case(suite, "pipeline/t2va[cpu]")
    assert _children(tc) == ["failure", "rerunFailure"]
    failure = tc.find("failure")
    assert failure is not None
    assert failure.get("type") == "CheckFailed"
    assert "ssim 0.8" in failure.get("message", "")
    lines = (failure.text or "").splitlines()
    assert lines[0].startswith("ssim-video: FAILED, obtained 0.8")
    assert "settings: win_size=7" in lines
    header = next(line for line in lines if "metric" in line and "frame" in line)
    assert header.split() == ["metric", "frame", "obtained", "op", "threshold", "passed"]
    rows = [line.split() for line in lines[lines.index(header) + 1 :]]
    assert ["ssim", "first", "0.99", ">=", "0.95", "yes"] in rows
    assert ["ssim", "mid", "0.8", ">=", "0.95", "NO"] in rows
    rerun = tc.find("rerunFailure")
    assert rerun is not None and "attempt 0" in rerun.get("message", "")
    trace = rerun.find("stackTrace")
    assert trace is not None and "metric" in (trace.text or "")


def test_error_timeout_crashed_are_errors(suite: ET.Element) -> None:
    for name, type_, text in (
        ("quant/int8[cuda]", "RuntimeError", "chars"),
        ("pipeline/slow[cpu]", "Timeout", "exceeded 30 s"),
        ("quant/segv[cpu]", "WorkerCrashed", "SIGSEGV"),
    ):
        tc = _case(suite, name)
        assert _children(tc) == ["error"], name
        err = tc.find("error")
        assert err is not None
        assert err.get("type") == type_
        assert text in err.get("message", "")
        assert "Traceback (most recent call last)" in (err.text or "")
    assert _props(_case(suite, "quant/int8[cuda]"))["simulated"] == "true"


def test_invalid_xml_characters_are_stripped(suite: ET.Element) -> None:
    err = _case(suite, "quant/int8[cuda]").find("error")
    assert err is not None
    assert err.get("message") == 'RuntimeError: ctl[31m chars  & <tag> "q"'
    assert xml_safe("a\x00b\x0bc\td\ne\uffff") == "abc\td\ne"


def test_skipped_and_budget_declined(suite: ET.Element) -> None:
    skipped = _case(suite, "loader/npu-only[cpu]").find("skipped")
    assert skipped is not None and skipped.get("message") == "needs platform npu"
    tc = _case(suite, "pipeline/huge[cpu]")
    assert _children(tc) == ["failure"]
    failure = tc.find("failure")
    assert failure is not None
    assert failure.get("type") == "budget_declined"
    assert "12 s left" in failure.get("message", "")


def test_flaky_case_passes_with_flaky_children(suite: ET.Element) -> None:
    tc = _case(suite, "pipeline/wobbly[cpu]")
    assert _children(tc) == ["flakyFailure", "flakyError"]
    ff, fe = tc.find("flakyFailure"), tc.find("flakyError")
    assert ff is not None and fe is not None
    assert ff.get("type") == "CheckFailed"
    assert fe.get("type") == "OSError" and "disk hiccup" in fe.get("message", "")
    assert "retry 1" in fe.get("message", "")
    trace = fe.find("stackTrace")
    assert trace is not None and "Traceback" in (trace.text or "")
    assert _props(tc)["status"] == "flaky"


def test_overwrites_atomically(tmp_path: Path) -> None:
    out = tmp_path / "junit.xml"
    out.write_text("stale")
    write_junit(_report(), out)
    assert ET.parse(out).getroot().get("tests") == "8"
