"""The shard split: longest batch first onto the least-loaded shard, the same on every machine,
recorded durations where a report has them and estimates (that say how) where not."""

from __future__ import annotations

import pytest

from harness.cases.plan import PlanItem, build_plan, shuffle_plan
from harness.cases.shard import (
    Recorded,
    expected_seconds,
    parse_shard_spec,
    recorded_durations,
    split,
)
from harness.errors import UsageError
from harness.model import Attempt, Case, CaseResult, RunReport


def case(cid: str, kind: str = "loader", source: str = "cases/a.toml", **kw: object) -> Case:
    return Case(id=cid, kind=kind, source=source, target="m:f", **kw)  # type: ignore[arg-type]


def rec(seconds: float, kind: str = "loader", runs: int = 1) -> Recorded:
    return Recorded(kind, seconds, runs)


def test_lpt_puts_the_longest_first_on_the_least_loaded_shard() -> None:
    items = build_plan([case(n) for n in "abcdef"], ["cpu"])
    durations = {(n, "cpu"): rec(s) for n, s in zip("abcdef", [7, 5, 4, 3, 2, 2], strict=True)}
    plan = split(items, 2, durations)
    # LPT: a(7)->1, b(5)->2, c(4)->2 (9), d(3)->1 (10), e(2)->2 (11)... then f(2)->1 (12)
    assert {it.case.id: s for it, s in zip(plan.items, plan.shard_of, strict=True)} == {
        "a": 1, "b": 2, "c": 2, "d": 1, "e": 2, "f": 1,
    }  # fmt: skip
    assert plan.loads() == [12.0, 11.0]
    assert [it.case.id for it in plan.items_of(2)] == ["b", "c", "e"]  # in plan order
    assert plan.ideal_s() == pytest.approx(11.5)


def test_ties_are_broken_by_name_and_shard_index_so_every_machine_agrees() -> None:
    cases = [case(n) for n in ("d", "b", "c", "a")]
    durations = {(n, "cpu"): rec(1.0) for n in "abcd"}
    one = split(build_plan(cases, ["cpu"]), 2, durations)
    # Equal seconds: batches in name order a, b, c, d; each onto the lowest least-loaded shard.
    assert [it.case.id for it in one.items_of(1)] == ["a", "c"]
    assert [it.case.id for it in one.items_of(2)] == ["b", "d"]
    shuffled = split(shuffle_plan(build_plan(cases, ["cpu"]), 3), 2, durations)
    assert shuffled.digest == one.digest
    assert sorted(it.case.id for it in shuffled.items_of(1)) == ["a", "c"]
    # A different split is a different digest.
    assert split(build_plan(cases, ["cpu"]), 3, durations).digest != one.digest


def test_a_batch_stays_on_one_shard() -> None:
    cases = [case("x1", source="cases/x.toml"), case("x2", source="cases/x.toml")]
    cases += [case("y1", source="cases/y.toml"), case("z1", source="cases/z.toml")]
    durations = {(c.id, "cpu"): rec(1.0) for c in cases}
    by_file = split(build_plan(cases, ["cpu"]), 3, durations, by="file")
    shard_of = {it.case.id: s for it, s in zip(by_file.items, by_file.shard_of, strict=True)}
    assert shard_of["x1"] == shard_of["x2"] == 1  # the 2 s file first
    assert {shard_of["y1"], shard_of["z1"]} == {2, 3}
    assert by_file.ideal_s() == 2.0  # the largest batch, not total / 3
    by_case = split(build_plan(cases, ["cpu"]), 3, durations)
    assert by_case.loads() == [2.0, 1.0, 1.0]
    by_kind = split(build_plan(cases, ["cpu"]), 3, durations, by="kind")
    assert by_kind.loads() == [4.0, 0.0, 0.0]


def test_recorded_durations_sum_attempts_per_case_and_platform() -> None:
    def result(cid: str, platform: str, secs: list[float], retry_last: bool = False) -> CaseResult:
        attempts = tuple(
            Attempt(
                cid,
                platform,
                i,
                "passed",
                0,
                duration_s=s,
                retry=1 if retry_last and i == len(secs) - 1 else 0,
            )
            for i, s in enumerate(secs)
        )
        return CaseResult(cid, "quant", platform, "passed", attempts=attempts)

    def report(*cases: CaseResult) -> RunReport:
        return RunReport("r", "", "", (), "cpu", {}, cases)

    skipped = CaseResult("s", "quant", "cpu", "skipped")
    got = recorded_durations(
        [
            report(result("a", "cpu", [1.0, 2.0], retry_last=True), result("a", "cuda", [9.0])),
            report(result("a", "cpu", [5.0]), skipped),
        ]
    )
    assert got[("a", "cpu")] == Recorded("quant", 4.0, 1)  # median of 3 s and 5 s; 1 first try
    assert got[("a", "cuda")].seconds == 9.0
    assert ("s", "cpu") not in got  # no attempt, nothing recorded


def test_unrecorded_cases_are_estimated_and_say_how() -> None:
    items = [
        PlanItem(case("known"), "cpu"),
        PlanItem(case("same-kind", repeats=2, warmup=1), "cpu"),
        PlanItem(case("other-kind", kind="pipeline"), "cpu"),
        PlanItem(case("off", platforms=("cuda",)), "cpu", skip_reason="declares cuda"),
    ]
    got = expected_seconds(items, {("known", "cpu"): rec(2.0, runs=2), ("k2", "cpu"): rec(4.0)})
    assert got[0].seconds == 2.0 and got[0].estimate is None
    # loader per run: median of 1.0 (known: 2 s over 2 runs) and 4.0 -> 2.5 s, x 3 runs.
    assert got[1].seconds == pytest.approx(7.5)
    assert got[1].estimate == "median of 2 recorded loader case(s): 2.5 s/run x 3 run(s)"
    assert got[2].estimate is not None and "none of kind pipeline" in got[2].estimate
    assert got[3].seconds == 0.0 and got[3].estimate is not None
    assert "skipped" in got[3].estimate
    blind = expected_seconds(items[2:3], {})
    assert blind[0].estimate is not None
    assert blind[0].estimate.startswith("default for pipeline (no recorded durations)")


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("0/3", "1-based"),
        ("4/3", "from 1 to 3"),
        ("x/y", "expected INDEX/COUNT"),
        ("2", "expected INDEX/COUNT"),
        ("1/0", "count must be"),
    ],
)
def test_bad_shard_specs_are_usage_errors(spec: str, says: str) -> None:
    with pytest.raises(UsageError, match=says) as info:
        parse_shard_spec(spec)
    assert info.value.exit_code == 2
    assert spec.split("/")[0] in str(info.value)


def test_good_shard_spec() -> None:
    assert parse_shard_spec("2/4") == (2, 4)
    assert parse_shard_spec("1/1") == (1, 1)


def test_shard_info_records_the_whole_plan() -> None:
    items = build_plan([case(n) for n in "abc"], ["cpu"])
    plan = split(items, 2, {(n, "cpu"): rec(1.0) for n in "abc"})
    info = plan.info(2)
    assert info.label == "2/2" and info.digest == plan.digest
    assert [p.name for p in info.plan] == [it.name for it in items]
    assert [p.name for p in info.planned()] == [it.name for it in plan.items_of(2)]
