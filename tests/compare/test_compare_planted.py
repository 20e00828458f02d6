"""`harness compare` end to end on planted failures that the final attempts alone do not show
(issue 18), on a toy repository (tests/compare/toyrepo.py): one comparison of ``base`` with
``planted`` over one case per failure mode, so the whole corpus costs one comparison. Each of
these cases read ``no_change`` (and the comparison exited 0) before the failure matrix counted
every attempt that ran and a side that did not run stopped counting as passed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from toyrepo import case_toml, compare, make_toy

from harness.model import Comparison
from harness.report.schema import validate_comparison

# one comparison of the planted cases (`planted`): built once, on one xdist worker
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("compare-planted")]


@pytest.fixture(scope="module")
def toy(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_toy(tmp_path_factory.mktemp("toy-e2e"))


# case id -> (mode, extra case keys)
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "hang": ("hang", {}),
    "warmcrash": ("warmcrash", {}),
    "intermittent": ("intermittent", {}),
    "known": ("intermittent", {"known_flaky": "toy#1: decode races the writer"}),
    "gone": ("", {"requires": ["toyextra"]}),
    "never": ("", {"requires": ["module_nobody_has"]}),
    "clean": ("", {}),
}


@pytest.fixture(scope="module")
def planted(toy: dict[str, Path]) -> tuple[int, dict[str, dict[str, Any]], str]:
    text = ""
    for cid, (mode, extra) in CASES.items():
        state = toy["root"] / f"state-{cid}"
        state.mkdir()
        text += case_toml(cid, state, mode, **extra)
    path = toy["root"] / "planted.toml"
    path.write_text(text)
    code, doc, out = compare(toy, "planted", path)
    assert doc is not None, out[-4000:]
    validate_comparison(doc)
    assert Comparison.from_json(doc).to_json() == doc
    return code, {c["id"]: c for c in doc["cases"]}, out


def test_a_hang_that_a_retry_hides_on_every_run_is_a_new_failure(planted: Any) -> None:
    _, cases, out = planted
    c = cases["hang"]
    assert c["verdict"] == "new_failure", out[-3000:]
    fm = c["failures"]
    assert fm["head_failed"] == 0 and fm["head_retried"] >= 3  # every final passed
    assert any("timeout" in s.lower() for s in fm["head_only"]), fm
    assert "hidden by a retry" in c["reason"]


def test_a_crash_in_a_warm_up_is_a_new_failure(planted: Any) -> None:
    c = planted[1]["warmcrash"]
    assert c["verdict"] == "new_failure", c
    assert c["failures"]["head_only"] and "warm-up" in c["reason"]


def test_a_head_only_failure_in_one_run_blocks_with_its_rate(planted: Any) -> None:
    c = planted[1]["intermittent"]
    assert c["verdict"] == "new_failure", c
    # 3 rounds, each in a fresh pair of workers with its own warm-up: 6 runs per side; the
    # failing third call is the second pair's warm-up
    assert "1 of 6 head runs, 0 of 6 base" in c["reason"], c["reason"]


def test_known_flaky_in_the_case_file_downgrades_it_and_says_so(planted: Any) -> None:
    c = planted[1]["known"]
    assert c["verdict"] == "flaky", c
    assert c["failures"]["known_flaky"] == "toy#1: decode races the writer"
    assert "known flaky" in c["reason"]


def test_a_side_skipped_for_a_missing_module_is_missing_not_passed(planted: Any) -> None:
    c = planted[1]["gone"]
    assert c["verdict"] == "missing", c
    assert "head: skipped" in c["reason"] and "toyextra" in c["reason"]


def test_a_case_both_sides_skip_alike_is_skipped(planted: Any) -> None:
    c = planted[1]["never"]
    assert c["verdict"] == "skipped" and "module_nobody_has" in c["reason"], c


def test_the_clean_case_is_no_change_and_the_comparison_exits_3(planted: Any) -> None:
    """A missing side outranks the new failures: the comparison is incomplete (3)."""
    code, cases, out = planted
    assert cases["clean"]["failures"]["verdict"] == "no_change", cases["clean"]
    assert code == 3, out[-3000:]


def test_a_case_file_head_broke_is_an_input_error(toy: dict[str, Path]) -> None:
    code, doc, out = compare(toy, "broken-case", None)
    assert code == 2, out[-3000:]
    assert "toy.toml" in out and "target" in out
    assert doc is None or doc["load_errors"]


def test_nothing_ran_exits_5(toy: dict[str, Path]) -> None:
    path = toy["root"] / "never.toml"
    state = toy["root"] / "state-never-only"
    state.mkdir()
    path.write_text(case_toml("never", state, requires=["module_nobody_has"]))
    code, doc, out = compare(toy, "planted", path, run_id="never-only")
    assert doc is not None and [c["verdict"] for c in doc["cases"]] == ["skipped"]
    assert code == 5, out[-3000:]
    # a skip is decided by the side's checkout and environment: one round, not three, each
    # in a fresh pair of workers
    assert doc["cases"][0]["rounds"] == 1, out[-3000:]
    assert json.loads((toy["runs"] / "never-only" / "comparison.json").read_text())


def pids(toy: dict[str, Path], run_id: str, side: str, case_id: str) -> dict[int, set[int]]:
    """round -> the worker pids of that side's attempts of that case (warm-ups included)."""
    doc = json.loads((toy["runs"] / run_id / side / "report.json").read_text())
    (case,) = [c for c in doc["cases"] if c["id"] == case_id]
    out: dict[int, set[int]] = {}
    for a in case["attempts"]:
        out.setdefault(a["round"], set()).add(a["worker_pid"])
    return out


def test_every_round_runs_in_a_fresh_pair_of_warmed_up_workers(
    toy: dict[str, Path], planted: Any
) -> None:
    """A process's own speed must not bias every round of a side: no two rounds share a worker
    (within a round the worker may still be replaced: the hanging case's timeout kills it)."""
    _, cases, _ = planted
    assert cases["clean"]["rounds"] == 3
    for side in ("base", "head"):
        by_round = pids(toy, "planted", side, "clean")
        assert sorted(by_round) == [0, 1, 2]
        seen = [p for ps in by_round.values() for p in ps]
        assert len(seen) == len(set(seen)), by_round
    doc = json.loads((toy["runs"] / "planted" / "comparison.json").read_text())
    assert doc["settings"]["workers"] == "per round"
    # Nor one zygote: its exec lays out memory once for every worker forked from it. Each
    # round's pair forks from a zygote of its own.
    forked = {}  # worker pid -> its zygote's pid, from the worker logs
    for log in (toy["runs"] / "planted" / "workers").glob("*.log"):
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith("[harness] worker ") and " forked from zygote " in line:
                worker, _, zyg = line.removeprefix("[harness] worker ").partition(
                    " forked from zygote "
                )
                forked[int(worker)] = int(zyg)
    zygotes: dict[int, set[int]] = {}
    for side in ("base", "head"):
        for rnd, ps in pids(toy, "planted", side, "clean").items():
            zygotes.setdefault(rnd, set()).update(forked[p] for p in ps)
    assert all(len(z) == 1 for z in zygotes.values()), zygotes  # both sides: one zygote
    assert len(set.union(*zygotes.values())) == len(zygotes), zygotes  # a new one per round


def test_reuse_workers_keeps_one_worker_per_side_and_says_so(toy: dict[str, Path]) -> None:
    path = toy["root"] / "reuse.toml"
    state = toy["root"] / "state-reuse"
    state.mkdir()
    path.write_text(case_toml("clean", state))
    code, doc, out = compare(
        toy, "planted", path, "--reuse-workers", run_id="reuse", runs_per_round=None
    )
    assert doc is not None and code == 0, out[-3000:]
    assert doc["settings"]["workers"] == "one per side"
    assert doc["settings"]["runs_per_round"] == 1
    for side in ("base", "head"):
        by_round = pids(toy, "reuse", side, "clean")
        assert len(set.union(*by_round.values())) == 1, by_round


def test_a_round_runs_each_side_three_times_by_default_alternating(toy: dict[str, Path]) -> None:
    """With a fresh pair per round, a round runs each case three times per side in A B B A A B
    order in that pair (start-up is paid once a round), and latency has one sample a round."""
    path = toy["root"] / "three.toml"
    state = toy["root"] / "state-three"
    state.mkdir()
    path.write_text(case_toml("clean", state))
    code, doc, out = compare(
        toy, "planted", path, "--rounds", "2", run_id="three", runs_per_round=None
    )
    assert doc is not None and code == 0, out[-3000:]
    assert doc["settings"]["runs_per_round"] == 3
    (case,) = doc["cases"]
    assert case["rounds"] == 2
    assert all(s["n_base"] == 2 and s["n_head"] == 2 for s in case["latency"]), case["latency"]
    runs = []
    for side in ("base", "head"):
        rep = json.loads((toy["runs"] / "three" / side / "report.json").read_text())
        (c,) = rep["cases"]
        runs += [(a["started_at"], side, a["round"]) for a in c["attempts"] if not a["warmup"]]
    order = [(r, s) for _, s, r in sorted(runs)]
    assert [r for r, _ in order] == [0] * 6 + [1] * 6
    assert "".join("A" if s == "base" else "B" for _, s in order) == "ABBAAB" + "BAABBA"
