"""Reading many shard reports fast without checking less: each distinct plan is validated and
parsed once, a shard whose plan differs is validated in full, and the compiled (fast) schema
check hands every document it refuses to jsonschema, which names the problem."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_shard_merge import shard_report, the_plan

from harness.errors import ReportFormatError
from harness.fsio import write_json_atomic
from harness.report.io import read_report, read_shard_reports
from harness.report.schema import _fast_validator, validate_report


def _write(tmp_path: Path, docs: list[dict[str, object]]) -> list[Path]:
    paths = []
    for n, doc in enumerate(docs, 1):
        path = tmp_path / f"shard-{n}" / "report.json"
        path.parent.mkdir()
        write_json_atomic(path, doc)
        paths.append(path)
    return paths


def test_one_plan_is_parsed_once_and_reads_as_read_report_does(tmp_path: Path) -> None:
    plan = the_plan(3)
    paths = _write(tmp_path, [shard_report(plan, i).to_json() for i in (1, 2, 3)])
    reports = read_shard_reports(paths)
    assert reports == [read_report(p) for p in paths]
    plans = [r.shard.plan for r in reports if r.shard is not None]
    assert plans[0] is plans[1] is plans[2]


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
    assert _fast_validator() is not None  # fastjsonschema is a dependency
    doc = shard_report(the_plan(2), 1).to_json()
    validate_report(doc)
    doc["cases"][0]["status"] = "kind-of-passed"
    with pytest.raises(ReportFormatError, match=r"\$\.cases\[0\]\.status"):
        validate_report(doc)


def test_only_pure_type_unions_are_collapsed_for_the_fast_check() -> None:
    from harness.report.schema import _type_unions

    union = {"anyOf": [{"type": "string"}, {"type": "null"}], "description": "d"}
    assert _type_unions(union) == {"type": ["string", "null"], "description": "d"}
    number = {"anyOf": [{"type": "number"}, {"enum": ["inf", "nan"]}]}
    assert _type_unions(number) == number  # not only types: left as it is
    assert _type_unions({"items": [union]}) == {
        "items": [{"type": ["string", "null"], "description": "d"}]
    }
