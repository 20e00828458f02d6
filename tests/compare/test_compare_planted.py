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
    assert "1 of 4 head runs, 0 of 4 base" in c["reason"], c["reason"]


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
    assert json.loads((toy["runs"] / "never-only" / "comparison.json").read_text())
