"""Reading many shard reports fast without checking less: each distinct plan is validated and
parsed once (found in later shards' text and left out before decoding, or equal once decoded),
a shard whose plan differs is validated in full, a malformed shard is named with its key, and
the compiled (fast) schema check hands every document it refuses to jsonschema, which names
the problem."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_shard_merge import shard_report, the_plan

from harness.errors import ReportFormatError
from harness.fsio import write_json_atomic
from harness.model import Attempt, CaseResult, CheckResult
from harness.model.vocab import json_dumps
from harness.report.io import read_report
from harness.report.schema import _fast_validator, validate_report
from harness.report.shard_io import _MARK, _elide_plan, read_shard_reports


def _write(tmp_path: Path, docs: list[dict[str, object]], indent: int | None = None) -> list[Path]:
    paths = []
    for n, doc in enumerate(docs, 1):
        path = tmp_path / f"shard-{n}" / "report.json"
        path.parent.mkdir()
        write_json_atomic(path, doc, indent=indent)
        paths.append(path)
    return paths


# indent=None: as harness run writes it (the plan found in the text); 2: spelled otherwise
# (the plan equal once decoded)
@pytest.mark.parametrize("indent", [None, 2])
def test_one_plan_is_parsed_once_and_reads_as_read_report_does(
    tmp_path: Path, indent: int | None
) -> None:
    plan = the_plan(3)
    paths = _write(tmp_path, [shard_report(plan, i).to_json() for i in (1, 2, 3)], indent)
    reports = read_shard_reports(paths)
    assert reports == [read_report(p) for p in paths]
    plans = [r.shard.plan for r in reports if r.shard is not None]
    assert plans[0] is plans[1] is plans[2]
    as_written = json_dumps(plan.info(1).to_json()["plan"], indent=None)
    found = _elide_plan(paths[2].read_text(), as_written)
    assert (found is not None) == (indent is None)  # each way was the one taken


def test_a_plan_copy_outside_the_shard_key_is_read_as_it_is(tmp_path: Path) -> None:
    """The plan's text found first somewhere else (here in an attempt's notes, written before
    ``shard``): that report is decoded from its own text, nothing replaced."""
    plan = the_plan(2)
    docs = [shard_report(plan, i).to_json() for i in (1, 2)]
    docs[1]["cases"][0]["attempts"][0]["notes"] = {"plan": docs[1]["shard"]["plan"]}  # type: ignore[index]
    paths = _write(tmp_path, docs)
    elided = _elide_plan(paths[1].read_text(), json_dumps(docs[0]["shard"]["plan"], indent=None))  # type: ignore[index]
    assert elided is not None and json.loads(elided)["shard"]["plan"] != _MARK  # the copy in notes
    reports = read_shard_reports(paths)
    assert reports == [read_report(p) for p in paths]
    assert reports[1].cases[0].attempts[0].notes["plan"] == docs[0]["shard"]["plan"]  # type: ignore[index]


def test_a_malformed_later_shard_is_named_with_its_key(tmp_path: Path) -> None:
    """The shards after the first are checked with their plan left out: a bad key in them is
    still refused, naming the file and the key, as is a file that is not JSON."""
    plan = the_plan(3)
    docs = [shard_report(plan, i).to_json() for i in (1, 2, 3)]
    docs[2]["cases"][0]["attempts"][0]["stages"] = {"decode": "fast"}  # type: ignore[index]
    paths = _write(tmp_path, docs)
    with pytest.raises(ReportFormatError) as err:
        read_shard_reports(paths)
    assert str(err.value).startswith(f"{paths[2]}: $.cases[0].attempts[0].stages.decode:")
    broken = paths[1].read_text().replace('"cases": [', '"cases": [,', 1)  # the plan intact
    paths[2].write_text(broken)
    with pytest.raises(ReportFormatError, match=r"shard-3/report.json: not valid JSON: .*\(char "):
        read_shard_reports(paths)


def test_a_shard_whose_plan_differs_is_validated_in_full(tmp_path: Path) -> None:
    plan = the_plan(3)
    docs = [shard_report(plan, i).to_json() for i in (1, 2)]
    bad = json.loads(json.dumps(docs[1]))
    bad["shard"]["plan"][0]["shard"] = "one"  # not an integer
    paths = _write(tmp_path, [docs[0], bad])
    with pytest.raises(ReportFormatError) as err:
        read_shard_reports(paths)
    assert str(paths[1]) in str(err.value) and "$.shard.plan[0].shard" in str(err.value)


def test_the_fast_check_defers_every_refusal_to_jsonschema() -> None:
    assert _fast_validator() is not None  # jsonschema-rs is a dependency
    doc = shard_report(the_plan(2), 1).to_json()
    validate_report(doc)
    doc["cases"][0]["status"] = "kind-of-passed"
    with pytest.raises(ReportFormatError, match=r"\$\.cases\[0\]\.status"):
        validate_report(doc)


def test_a_case_and_its_attempts_checks_read_back_with_their_json_types() -> None:
    """A case's checks start with its last measured attempt's; read back, each is equal to
    what was written, and a value JSON spells as another number type keeps that type."""
    check = CheckResult("ssim(video)", "ssim", 1.0, ">=", 0.95, "fail", True)
    latency = CheckResult("latency", "latency", 2.5, "<=", 3.0, "fail", True)
    attempt = Attempt("c", "cpu", 0, "passed", 0, checks=(check,))
    case = CaseResult("c", "quant", "cpu", "passed", checks=(check, latency), attempts=(attempt,))
    doc = case.to_json()
    back = CaseResult.from_json(doc)
    assert back == case and back.checks[0] == back.attempts[0].checks[0]
    doc["checks"][0]["value"] = 1  # equal to 1.0 in Python, another number in JSON
    back = CaseResult.from_json(doc)
    assert type(back.checks[0].value) is int and type(back.attempts[0].checks[0].value) is float
    assert back.checks[1] == latency
