"""Tests for harness/schema/report.schema.json and harness.schema_check."""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

import jsonschema
import pytest

from harness.errors import ReportFormatError
from harness.model import STATUSES, Attempt, CaseResult, CheckResult, ErrorInfo, RunReport
from harness.model.hang import HangDiagnosis, ProcessDiagnosis
from harness.report.schema import _fast_validator, load_report_schema, validate_report
from harness.worker.envinfo import ENV_KEYS, collect_env


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    """A full report, every optional part filled in, round-tripped through strict JSON."""
    check = CheckResult(
        name="psnr-video",
        metric="psnr",
        value=float("inf"),
        op=">=",
        threshold=30.0,
        policy="fail",
        passed=True,
        output="video",
        settings={"data_range": 1.0},
        details=({"frame": "mid", "obtained": float("inf"), "threshold": 30.0},),
    )
    nan_check = CheckResult("finite-audio", "finite", float("nan"), "==", 1.0, "warn", False)
    skipped_check = CheckResult("clip", "clip", None, ">=", 0.3, "fail", None, reason="no model")
    passed = Attempt(
        case_id="t2va",
        platform="cpu",
        index=1,
        status="passed",
        seed=7,
        warmup=False,
        retry=1,
        repeat=0,
        inputs={"prompt": "blake3:00ff"},
        stages={"encode": 0.01, "denoise": 0.5, "decode": 0.02},
        fingerprints={
            "latents": {
                "hash": "blake3:aa",
                "dtype": "bfloat16",
                "shape": [1, 4, 8, 8],
                "nonfinite": 0,
                "min": -1.5,
                "max": 2.0,
                "mean": 0.01,
            },
            "empty": {
                "hash": "blake3:bb",
                "dtype": "float32",
                "shape": [0],
                "nonfinite": 0,
                "min": None,
                "max": None,
                "mean": None,
            },
        },
        metrics={"psnr": float("inf"), "ssim": 0.99},
        notes={"backend": "convrot"},
        outputs={
            "video": {
                "kind": "video",
                "hash": "blake3:cc",
                "path": "out/video.mp4",
                "bytes": 1234,
                "nonfinite": 0,
                "meta": {"fps": 8},
            }
        },
        checks=(check, nan_check),
        error=None,
        duration_s=0.6,
        worker_pid=4242,
        started_at="2026-01-01T00:00:01Z",
        fresh_process=False,
    )
    failed = dataclasses.replace(
        passed,
        index=0,
        retry=0,
        status="error",
        checks=(),
        error=ErrorInfo("RuntimeError", "boom", "RuntimeError:x.py:3", "Traceback ..."),
        not_retried="not retried: a readiness timeout is never retried",
        hang=HangDiagnosis(
            "readiness timeout", "2026-01-01T00:00:01Z", 1.5, 10.0, 1.0,
            (
                ProcessDiagnosis(
                    7, 1, "python -m tinyav.serve", 0, "the started process", 0.0, "/s.log",
                    False, 0, "loading", 2.5, "py-spy --native", "Thread 7\n", "", "f (a.py:1)",
                ),
                ProcessDiagnosis(
                    8, 7, "rank", None, "", None, "", None, 0, "", None, "not available", "",
                    "py-spy: not on PATH",
                ),
            ),
        ),
    )  # fmt: skip
    cases = (
        CaseResult(
            "t2va",
            "pipeline",
            "cpu",
            "flaky",
            simulated=False,
            source="cases/pipeline/t2va.toml",
            reason=None,
            checks=(check, nan_check, skipped_check),
            attempts=(failed, passed),
            seed=7,
            repeats=1,
        ),
        CaseResult("npu", "loader", "npu", "skipped", simulated=True, reason="no npu"),
    )
    report = RunReport(
        run_id="20260101-000000-abcd",
        started_at="2026-01-01T00:00:00Z",
        finished_at="2026-01-01T00:00:09Z",
        argv=("harness", "run"),
        runner="cpu",
        env=collect_env(None),
        cases=cases,
        interrupted=False,
        budget_s=600.0,
    )
    return json.loads(json.dumps(report.to_json(), allow_nan=False))


def _rejected(doc: dict[str, Any]) -> str:
    with pytest.raises(ReportFormatError) as info:
        validate_report(doc)
    return str(info.value)


def test_schema_is_valid_draft_2020_12() -> None:
    schema = load_report_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)


def test_full_report_validates(doc: dict[str, Any]) -> None:
    validate_report(doc)
    # And it reads back into the same records.
    assert RunReport.from_json(doc).to_json() == doc


def test_schema_matches_model(doc: dict[str, Any]) -> None:
    """Drift guard: the schema's required keys are exactly what to_json writes."""
    defs = load_report_schema()["$defs"]
    assert set(load_report_schema()["required"]) == set(doc)
    assert set(defs["case"]["required"]) == set(doc["cases"][0])
    # (the passed attempt: the failed one also carries the optional not_retried and hang)
    assert set(defs["attempt"]["required"]) == set(doc["cases"][0]["attempts"][1])
    assert set(defs["check"]["required"]) == set(doc["cases"][0]["checks"][0])
    assert set(defs["error"]["required"]) == set(doc["cases"][0]["attempts"][0]["error"])
    hang = doc["cases"][0]["attempts"][0]["hang"]
    assert set(defs["hang"]["required"]) == set(hang)
    assert set(defs["hang_process"]["required"]) == set(hang["processes"][0])
    assert defs["case_status"]["enum"] == list(STATUSES)
    assert set(defs["env"]["required"]) == set(ENV_KEYS)


@pytest.mark.parametrize(
    ("mutate", "path"),
    [
        (lambda d: d.update(bogus=1), "$.bogus"),
        (lambda d: d.pop("run_id"), "$.run_id"),
        (lambda d: d["cases"][0].update(status="green"), "$.cases[0].status"),
        (
            lambda d: d["cases"][0]["attempts"][1].update(status="flaky"),
            "$.cases[0].attempts[1].status",
        ),
        (lambda d: d["cases"][0]["attempts"][0].update(extra=True), "$.cases[0].attempts[0].extra"),
        (
            lambda d: d["cases"][0]["attempts"][0]["error"].update(code=3),
            "$.cases[0].attempts[0].error.code",
        ),
        (
            lambda d: d["cases"][0]["checks"][0].update(policy="maybe"),
            "$.cases[0].checks[0].policy",
        ),
        (
            lambda d: d["cases"][0]["attempts"][1]["stages"].update(decode="fast"),
            "$.cases[0].attempts[1].stages.decode",
        ),
        (
            lambda d: d["cases"][0]["attempts"][1]["fingerprints"]["latents"].pop("nonfinite"),
            "$.cases[0].attempts[1].fingerprints.latents.nonfinite",
        ),
        (
            lambda d: d["cases"][0]["attempts"][1]["outputs"]["video"].pop("hash"),
            "$.cases[0].attempts[1].outputs.video.hash",
        ),
        (
            lambda d: d["cases"][0]["attempts"][0]["hang"]["processes"][1].update(rank=-1),
            "$.cases[0].attempts[0].hang.processes[1].rank",
        ),
        (lambda d: d["env"].pop("git"), "$.env.git"),
        (lambda d: d["summary"].update(passed=-1), "$.summary.passed"),
    ],
)
def test_mutations_are_rejected_naming_the_path(
    doc: dict[str, Any], mutate: Any, path: str
) -> None:
    bad = copy.deepcopy(doc)
    mutate(bad)
    message = _rejected(bad)
    assert f"report: {path}:" in message
    fast = _fast_validator()  # the compiled check refuses it too, never passing it alone
    assert fast is not None and fast(doc) and not fast(bad)


def test_env_is_open(doc: dict[str, Any]) -> None:
    d = copy.deepcopy(doc)
    d["env"]["new_field"] = {"anything": [1, 2]}
    validate_report(d)


def test_other_schema_version_is_named(doc: dict[str, Any]) -> None:
    d = dict(doc, schema_version=99)
    message = _rejected(d)
    assert "$.schema_version" in message and "99" in message


def test_not_an_object() -> None:
    assert "expected a JSON object" in _rejected([])  # type: ignore[arg-type]
