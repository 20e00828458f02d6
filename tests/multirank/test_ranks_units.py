"""Multi-rank cases without processes: the ``ranks`` and ``replicated`` keys (one clear line
per mistake naming the file, the case and the key), the rank-consistency check, the
slowest-rank table, the per-rank record through report.json, device pinning per rank."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cases.load import load_file
from harness.errors import CaseFileError
from harness.model import Attempt, case_from_json, case_to_json
from harness.model.ranks import RanksRecord, check_consistency, slowest
from harness.worker.ranks_case import consistency_check, rank_devices, ranks_limits

CASE = """
[[case]]
id = "tp2"
kind = "{kind}"
{body}
"""


def load(tmp_path: Path, body: str, kind: str = "pipeline") -> list:  # type: ignore[type-arg]
    path = tmp_path / "c.toml"
    path.write_text(CASE.format(kind=kind, body=body))
    return load_file(path)


def error(tmp_path: Path, body: str, kind: str = "pipeline") -> str:
    with pytest.raises(CaseFileError) as info:
        load(tmp_path, body, kind)
    message = str(info.value)
    assert "\n" not in message and str(tmp_path / "c.toml") in message, message
    assert "case 'tp2'" in message, message
    return message


def test_ranks_and_replicated_load_and_survive_the_worker_protocol(tmp_path: Path) -> None:
    (case,) = load(tmp_path, 'target = "m:f"\nranks = 2\nreplicated = ["denoise.*", "x"]')
    assert (case.ranks, case.replicated) == (2, ("denoise.*", "x"))
    assert case_from_json(case_to_json(case)) == case
    (single,) = load(tmp_path, 'target = "m:f"', kind="quant")
    assert (single.ranks, single.replicated) == (1, ())


@pytest.mark.parametrize(
    ("body", "kind", "says"),
    [
        ('target = "m:f"\nranks = 0', "pipeline", "key 'ranks' = 0: expected a positive integer"),
        ('target = "m:f"\nranks = -2', "pipeline", "key 'ranks' = -2: expected a positive"),
        ('target = "m:f"\nranks = "2"', "pipeline", "key 'ranks' = '2': expected positive int"),
        ('target = "m:f"\nranks = 2.0', "pipeline", "key 'ranks' = 2.0: expected positive int"),
        ('target = "m:f"\nranks = true', "pipeline", "key 'ranks' = True: expected positive int"),
        ('target = "m:f"\nranks = 2', "loader", "key 'ranks' = 2: kind = 'loader' does not run"),
        ('target = "m:f"\nranks = 2', "import", "expected it only on kinds pipeline, quant"),
        ('command = ["x"]\nranks = 2', "pipeline", "key 'ranks' = 2: expected a case with a"),
        ('target = "m:f"\nreplicated = ["a"]', "pipeline", "key 'replicated' = ['a']: expected"),
        ('target = "m:f"\nranks = 1\nreplicated = ["a"]', "quant", "ranks = 2 or more"),
        ('target = "m:f"\nranks = 2\nreplicated = ["a b"]', "pipeline", "fnmatch patterns"),
        ('target = "m:f"\nranks = 2\nreplicated = "a"', "pipeline", "key 'replicated' = 'a'"),
    ],
)
def test_bad_ranks_are_one_line_naming_file_case_and_key(
    tmp_path: Path, body: str, kind: str, says: str
) -> None:
    assert says in error(tmp_path, body, kind)


def test_ranks_on_a_server_case_is_a_load_error(tmp_path: Path) -> None:
    body = 'ranks = 2\n[case.server]\ncommand = ["x"]\nready_url = "/health"'
    assert "kind = 'server' does not run ranks" in error(tmp_path, body, "server")


def fp(hash_: str) -> dict[str, object]:
    return {"hash": hash_, "dtype": "float32", "shape": [2], "device": "cpu"}


def test_replicated_fingerprints_that_agree_pass_and_others_are_not_compared() -> None:
    per_rank = {
        0: {"denoise.step00": fp("a"), "shard": fp("s0")},
        1: {"denoise.step00": fp("a"), "shard": fp("s1")},
    }
    verdict = check_consistency(per_rank, ["denoise.*"])
    assert (verdict.passed, verdict.compared) == (True, ("denoise.step00",))
    check = consistency_check(verdict)
    assert check.passed is True and not check.blocking and check.value == 0


def test_a_replicated_fingerprint_that_differs_or_is_missing_fails_naming_it() -> None:
    per_rank = {
        0: {"latents": fp("a"), "video": fp("v")},
        1: {"latents": fp("b")},
    }
    verdict = check_consistency(per_rank, ["latents", "video"])
    assert verdict.passed is False
    assert verdict.mismatches == (
        "latents differs (rank 0: a, rank 1: b)",
        "video: not recorded by rank(s) [1]",
    )
    check = consistency_check(verdict)
    assert check.blocking and check.value == 2 and "latents differs" in str(check.reason)


def test_nothing_matching_replicated_is_a_check_that_could_not_run() -> None:
    verdict = check_consistency({0: {"a": fp("x")}, 1: {"a": fp("x")}}, ["denoise.*"])
    assert verdict.passed is None
    check = consistency_check(verdict)
    assert check.unjudged and "no fingerprint matching" in str(check.reason)


def test_descriptions_without_a_hash_compare_apart_from_the_device() -> None:
    a = {"shape": [2], "min": 1.0, "device": "cuda:0"}
    b = {"shape": [2], "min": 1.0, "device": "cuda:1"}
    assert check_consistency({0: {"x": a}, 1: {"x": b}}, ["x"]).passed is True
    assert check_consistency({0: {"x": a}, 1: {"x": {**b, "min": 2.0}}}, ["x"]).passed is False


RECORD = RanksRecord(
    world_size=2,
    master_port=29500,
    stages={"0": {"load": 1.0, "denoise": 2.0}, "1": {"load": 1.5, "denoise": 2.0, "only1": 0.1}},
    exits={"0": "exit 0", "1": "exit 0"},
    devices={"0": "0", "1": "1"},
    replicated=("denoise.*",),
    consistency="1 replicated fingerprint(s) agree across 2 ranks",
)


def test_slowest_rank_per_stage_ties_go_to_the_lowest_rank() -> None:
    assert slowest(RECORD) == [
        ("load", 1, 1.5, {0: 1.0, 1: 1.5}),
        ("denoise", 0, 2.0, {0: 2.0, 1: 2.0}),
        ("only1", 1, 0.1, {1: 0.1}),
    ]


def test_the_record_round_trips_through_the_attempt_json() -> None:
    attempt = Attempt(case_id="tp2", platform="cpu", index=0, status="passed", seed=0)
    assert "ranks" not in attempt.to_json()
    with_ranks = Attempt.from_json({**attempt.to_json(), "ranks": RECORD.to_json()})
    assert with_ranks.ranks == RECORD
    assert Attempt.from_json(with_ranks.to_json()) == with_ranks


def test_each_rank_is_pinned_to_its_own_device_of_the_workers() -> None:
    env = {"CUDA_VISIBLE_DEVICES": "4,5"}
    assert rank_devices("cuda", 0, env) == {"CUDA_VISIBLE_DEVICES": "4", "HARNESS_DEVICES": "4"}
    assert rank_devices("cuda", 1, env)["CUDA_VISIBLE_DEVICES"] == "5"
    assert rank_devices("cuda", 2, {"CUDA_VISIBLE_DEVICES": "7"})["CUDA_VISIBLE_DEVICES"] == "7"
    assert rank_devices("cuda", 1, {}) == {}  # the worker is not pinned: nor are its ranks
    assert rank_devices("cpu", 1, env) == {}


def test_a_hang_is_reported_before_the_managers_deadline() -> None:
    for timeout in (6.0, 60.0, 300.0):
        limit, diagnosis = ranks_limits(timeout)
        assert 0 < limit < timeout and diagnosis > 0
        assert limit + diagnosis + 1.0 < timeout  # the kill's grace and the reply fit
