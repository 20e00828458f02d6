"""Merging shard reports: one report, coverage checked, inconsistent shards refused by name.

The reports are built from a real split of a plan and go through the real writers and reader
(report.json validated against the schema, junit.xml, summary.md)."""

from __future__ import annotations

import dataclasses
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from harness.cases.plan import build_plan
from harness.cases.shard import Recorded, ShardPlan, split
from harness.errors import InputError
from harness.model import Attempt, Case, CaseResult, MissingCase, RunReport, exit_code
from harness.report.io import read_report, write_run
from harness.report.merge import merge_reports

IDS = ("a", "b", "c", "d", "e", "f")


def the_plan(count: int = 3, ids: tuple[str, ...] = IDS) -> ShardPlan:
    cases = [Case(id=i, kind="quant", source="cases/q.toml", target="m:f") for i in ids]
    durations = {(i, "cpu"): Recorded("quant", 1.0 + n, 1) for n, i in enumerate(ids)}
    return split(build_plan(cases, ["cpu"]), count, durations)


def shard_report(plan: ShardPlan, index: int, *, status: str = "passed", **kw: object) -> RunReport:
    cases = tuple(
        CaseResult(
            it.case.id,
            it.case.kind,
            it.platform,
            status,  # type: ignore[arg-type]
            source=it.case.source,
            attempts=(Attempt(it.case.id, it.platform, 0, status, 0, duration_s=0.5),),  # type: ignore[arg-type]
        )
        for it in plan.items_of(index)
    )
    report = RunReport(
        run_id=f"shard{index}",
        started_at=f"2026-01-01T00:0{index}:00+00:00",
        finished_at=f"2026-01-01T00:1{index}:00+00:00",
        argv=("harness", "run", "--shard", f"{index}/{plan.count}"),
        runner="cpu",
        env={"error": "no worker started; environment not collected"},
        cases=cases,
        shard=plan.info(index),
    )
    return dataclasses.replace(report, **kw)  # type: ignore[arg-type]


def written(tmp_path: Path, report: RunReport) -> RunReport:
    """Through the real writer and reader (schema-checked)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    write_run(report, tmp_path, latest=False)
    return read_report(tmp_path)


def test_complete_merge_has_every_case_in_plan_order_and_exits_0(tmp_path: Path) -> None:
    plan = the_plan()
    shards = [(f"ci/shard-{i}", shard_report(plan, i)) for i in (3, 1, 2)]
    merged = merge_reports(shards, run_id="m")
    assert [c.id for c in merged.cases] == list(IDS)
    assert merged.missing == ()
    assert exit_code(merged) == 0
    assert merged.shard is not None and merged.shard.index is None
    assert merged.shard.digest == plan.digest
    assert [m.index for m in merged.merged_from] == [1, 2, 3]
    assert [m.path for m in merged.merged_from] == ["ci/shard-1", "ci/shard-2", "ci/shard-3"]
    assert merged.started_at.startswith("2026-01-01T00:01") and "00:13" in merged.finished_at
    back = written(tmp_path, merged)
    assert back == merged
    suite = ET.parse(tmp_path / "junit.xml").getroot()
    assert suite.get("tests") == "6" and suite.get("errors") == "0"


def test_an_absent_shard_lists_its_cases_missing_with_the_reason_and_exits_3(
    tmp_path: Path,
) -> None:
    plan = the_plan()
    merged = merge_reports([("s1", shard_report(plan, 1)), ("s3", shard_report(plan, 3))])
    lost = {it.case.id for it in plan.items_of(2)}
    assert lost and {m.id for m in merged.missing} == lost
    assert {m.reason for m in merged.missing} == {"shard 2/3 report not found (merged: 1/3, 3/3)"}
    assert {m.cause for m in merged.missing} == {"shard_absent"}
    assert not merged.complete
    assert exit_code(merged) == 3  # never a pass: nobody knows how those cases do
    written(tmp_path, merged)
    suite = ET.parse(tmp_path / "junit.xml").getroot()
    assert suite.get("tests") == "6" and suite.get("errors") == str(len(lost))
    errors = [tc for tc in suite.iter("testcase") if tc.find("error") is not None]
    assert all(tc.find("error").get("type") == "missing" for tc in errors)  # type: ignore[union-attr]
    summary = (tmp_path / "summary.md").read_text()
    assert f"**Missing** ({len(lost)} planned case(s)" in summary
    assert "shard 2/3 report not found" in summary


def test_fail_fast_cases_stay_missing_with_their_reason_and_the_run_fails(tmp_path: Path) -> None:
    plan = the_plan(count=2)
    first, *rest = plan.items_of(1)
    reason = f"not run: shard 1/2 stopped after {first.name} failed (--fail-fast)"
    failing = dataclasses.replace(
        shard_report(plan, 1),
        cases=(dataclasses.replace(shard_report(plan, 1).cases[0], status="failed"),),
        missing=tuple(
            MissingCase(it.case.id, it.case.kind, it.platform, reason, "fail_fast", 1)
            for it in rest
        ),
    )
    merged = merge_reports(
        [("s1", written(tmp_path / "s1", failing)), ("s2", shard_report(plan, 2))]
    )
    assert [m.reason for m in merged.missing] == [reason] * len(rest)
    assert merged.complete  # the run knows why: a failure it counts
    assert exit_code(merged) == 1
    # A shard report alone says the same.
    assert exit_code(failing) == 1


def test_a_shard_that_ran_only_some_cases_reports_the_rest_not_reported(tmp_path: Path) -> None:
    plan = the_plan(count=2)
    partial = shard_report(plan, 2)
    partial = dataclasses.replace(partial, cases=partial.cases[:1], interrupted=True)
    merged = merge_reports([("s1", shard_report(plan, 1)), ("ci/s2", partial)])
    expected = {it.case.id for it in plan.items_of(2)[1:]}
    assert {m.id for m in merged.missing} == expected
    assert {m.reason for m in merged.missing} == {
        "shard 2/2 report (ci/s2) has no result for it (that shard was interrupted)"
    }
    assert exit_code(merged) == 3


def test_shards_of_different_plans_are_refused_naming_the_folders() -> None:
    one, other = the_plan(), the_plan(ids=(*IDS, "g"))
    with pytest.raises(InputError) as info:
        merge_reports([("ci/a", shard_report(one, 1)), ("ci/b", shard_report(other, 2))])
    msg = str(info.value)
    assert "different plans" in msg and "ci/a" in msg and "ci/b" in msg
    assert one.digest in msg and other.digest in msg


def test_a_shard_given_twice_is_refused_naming_both() -> None:
    plan = the_plan()
    with pytest.raises(InputError, match=r"shard 2/3 given twice: ci/x and ci/y"):
        merge_reports([("ci/x", shard_report(plan, 2)), ("ci/y", shard_report(plan, 2))])


def test_overlapping_shards_are_refused() -> None:
    plan = the_plan(count=2)
    one, two = shard_report(plan, 1), shard_report(plan, 2)
    stolen = dataclasses.replace(two, cases=(*two.cases, one.cases[0]))
    with pytest.raises(InputError) as info:
        merge_reports([("ci/one", one), ("ci/two", stolen)])
    assert f"{one.cases[0].name} is reported twice, by ci/one and ci/two" in str(info.value)
    with pytest.raises(InputError, match="which the plan puts on shard 1/2"):
        merge_reports([("ci/two", stolen)])


@pytest.mark.parametrize("which", ["plain", "merged"])
def test_only_shard_reports_merge(which: str) -> None:
    plan = the_plan(count=2)
    report = shard_report(plan, 1)
    if which == "plain":
        report = dataclasses.replace(report, shard=None)
        says = "is not a shard report"
    else:
        report = merge_reports([("s1", report), ("s2", shard_report(plan, 2))])
        says = "already a merged report"
    with pytest.raises(InputError, match=says) as info:
        merge_reports([("ci/odd", report)])
    assert "ci/odd" in str(info.value)


def parts_of(plan: ShardPlan, index: int) -> tuple[RunReport, RunReport]:
    """Shard ``index`` as two pytest-xdist workers report it: each its own cases, its part."""
    whole = shard_report(plan, index)
    info = whole.shard
    assert info is not None
    return tuple(  # type: ignore[return-value]
        dataclasses.replace(
            whole,
            run_id=f"shard{index}-{gw}",
            cases=whole.cases[n::2],
            shard=dataclasses.replace(info, part=gw),
        )
        for n, gw in enumerate(("gw0", "gw1"))
    )


def test_the_xdist_parts_of_a_shard_merge_into_it(tmp_path: Path) -> None:
    plan = the_plan(count=2)
    gw0, gw1 = parts_of(plan, 1)
    assert gw0.cases and gw1.cases  # both workers ran something
    shards = [
        ("ci/1-gw0", written(tmp_path / "a", gw0)),  # the part survives the schema and reader
        ("ci/1-gw1", gw1),
        ("ci/2", shard_report(plan, 2)),
    ]
    merged = merge_reports(shards)
    assert [c.id for c in merged.cases] == [p.id for p in plan.info(1).plan]
    assert merged.missing == () and exit_code(merged) == 0
    assert [(m.index, m.path) for m in merged.merged_from] == [
        (1, "ci/1-gw0"),
        (1, "ci/1-gw1"),
        (2, "ci/2"),
    ]
    # A lost part: its cases are missing, named with the parts that were found.
    merged = merge_reports([shards[0], shards[2]])
    assert [m.id for m in merged.missing] == [c.id for c in gw1.cases]
    assert all(
        m.cause == "not_reported" and "shard 1/2 report (ci/1-gw0) has no result" in m.reason
        for m in merged.missing
    )
    assert exit_code(merged) == 3


def test_a_part_given_twice_or_next_to_its_whole_shard_is_refused() -> None:
    plan = the_plan(count=2)
    gw0, gw1 = parts_of(plan, 1)
    with pytest.raises(InputError, match=r"shard 1/2 \(gw0\) given twice: ci/a and ci/b$"):
        merge_reports([("ci/a", gw0), ("ci/b", gw0)])
    with pytest.raises(InputError, match="a whole shard and one xdist worker's part of it"):
        merge_reports([("ci/whole", shard_report(plan, 1)), ("ci/part", gw1)])
