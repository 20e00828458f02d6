"""Code provenance on recorded attempts: which target files make a case not comparable, in the
rule itself and in a comparison of two saved runs (the live one is in test_provenance_e2e)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.compare.provenance import NOTE, Origin, check, origin_from_env, target_files
from harness.compare.run import CompareRequest
from harness.compare.saved import compare_reports
from harness.model import Attempt, CaseResult, RunReport
from harness.report.schema import validate_comparison


def side(*files: str, side: str = "head") -> CaseResult:
    atts = tuple(
        Attempt(
            "c",
            "cpu",
            i,
            "passed",
            1,
            repeat=i,
            round=i,
            side=side,  # type: ignore[arg-type]
            notes={NOTE: f},
            stages={"s": 1.0},
            duration_s=1.0,
        )
        for i, f in enumerate(files)
    )
    return CaseResult("c", "pipeline", "cpu", "passed", attempts=atts, side=side)  # type: ignore[arg-type]


B, H = Origin.of(["/w/base"]), Origin.of(["/w/head"])


def test_each_side_from_its_own_checkout_is_comparable() -> None:
    assert check(side("/w/base/m/a.py"), side("/w/head/m/a.py"), {"base": B, "head": H}) is None


def test_a_file_outside_the_sides_checkout_names_both_files() -> None:
    why = check(side("/w/base/m/a.py"), side("/tree/m/a.py"), {"base": B, "head": H})
    assert why is not None and why.startswith("code provenance: head's target came from outside")
    assert "/tree/m/a.py" in why and "/w/base/m/a.py" in why and "/w/head" in why


def test_a_folder_that_only_starts_like_the_checkout_is_outside_it() -> None:
    assert check(None, side("/w/head2/m/a.py"), {"head": H}) is not None


def test_one_file_for_two_checkouts_is_head_compared_with_itself() -> None:
    # both checkouts hold /shared (say, code roots that point outside them): still one file
    b, h = Origin.of(["/w/base", "/shared"]), Origin.of(["/w/head", "/shared"])
    why = check(side("/shared/m.py"), side("/shared/m.py"), {"base": b, "head": h})
    assert why is not None and "head was compared with itself" in why


def test_one_checkout_for_both_sides_may_share_the_file() -> None:
    # an A/A run, or one revision in two environments: one checkout, one file, by design
    one = Origin.of(["/w/code"])
    assert check(side("/w/code/m.py"), side("/w/code/m.py"), {"base": one, "head": one}) is None


def test_its_own_environment_counts_only_where_given() -> None:
    b = Origin.of(["/w/code"], "/venvs/a")
    h = Origin.of(["/w/code"], "/venvs/b")
    ok = check(side("/venvs/a/lib/m.py"), side("/venvs/b/lib/m.py"), {"base": b, "head": h})
    assert ok is None
    crossed = check(side("/venvs/a/lib/m.py"), side("/venvs/a/lib/m.py"), {"base": b, "head": h})
    assert crossed is not None and "head's target came from outside" in crossed


def test_unknown_places_and_no_target_file_are_not_judged() -> None:
    assert check(side("/anywhere/m.py"), side("/else/m.py"), {}) is None
    assert check(side("None"), side("None"), {"base": B, "head": H}) is None
    assert target_files(side("/a.py", "/a.py", "/b.py")) == ["/a.py", "/b.py"]


def test_origin_from_a_report_environment() -> None:
    env: dict[str, Any] = {
        "code_roots": ["/w/head/src"],
        "checkout": "/w/head",
        "python": {"prefix": "/venv"},
    }
    assert origin_from_env(env, own_env=False) == Origin.of(["/w/head/src", "/w/head"])
    assert origin_from_env(env, own_env=True).env == "/venv"
    assert not origin_from_env({}, own_env=True).known


@pytest.fixture(scope="module")
def env() -> dict[str, Any]:
    from harness.worker.envinfo import collect_env

    return collect_env(None)


def saved(tmp: Path, name: str, env: dict[str, Any], root: str, file: str) -> Path:
    rep = RunReport(
        name, "t0", "t1", (), "cpu", {**env, "code_roots": [root]}, (side(file, file, file),)
    )
    (tmp / name).mkdir()
    (tmp / name / "report.json").write_text(json.dumps(rep.to_json()))
    return tmp / name


def test_saved_runs_whose_target_came_from_elsewhere_are_not_comparable(
    tmp_path: Path, env: dict[str, Any]
) -> None:
    a = saved(tmp_path, "a", env, "/w/base", "/w/base/m.py")
    b = saved(tmp_path, "b", env, "/w/head", "/w/tree/m.py")
    req = CompareRequest(out_root=tmp_path / "out", comparison_id="x", noise_dir=None)
    (c,) = compare_reports(a, b, request=req).cases
    assert c.verdict == "not_comparable"
    assert (c.reason or "").startswith("code provenance") and "/w/tree/m.py" in (c.reason or "")
    validate_comparison(json.loads((tmp_path / "out" / "x" / "comparison.json").read_text()))
    good = saved(tmp_path, "c", env, "/w/head", "/w/head/m.py")
    req = CompareRequest(out_root=tmp_path / "out", comparison_id="y", noise_dir=None)
    (c,) = compare_reports(a, good, request=req).cases
    assert c.verdict != "not_comparable", c.reason


def served(worker: str | None, **others: str) -> CaseResult:
    """A case whose attempt noted the worker's target file (None: none, as a server case) and
    other processes' files under prefixed keys (``rank1``, ``server``, ``server.rank1``)."""
    notes: dict[str, Any] = {f"{k.replace('_', '.')}.{NOTE}": f for k, f in others.items()}
    if worker is not None:
        notes[NOTE] = worker
    att = Attempt("c", "cpu", 0, "passed", 1, side="head", notes=notes, duration_s=1.0)
    return CaseResult("c", "server", "cpu", "passed", attempts=(att,), side="head")


def test_a_server_rank_or_a_rank_from_another_checkout_is_not_comparable() -> None:
    ok = served(None, server="/w/head/srv.py", server_rank1="/w/head/srv.py")
    assert target_files(ok) == ["/w/head/srv.py"]
    assert check(served(None, server="/w/base/srv.py"), ok, {"base": B, "head": H}) is None
    # rank 1 of head's server imported the working tree's copy: not head's code
    stray = served(None, server="/w/head/srv.py", server_rank1="/tree/srv.py")
    why = check(served(None, server="/w/base/srv.py"), stray, {"base": B, "head": H})
    assert why is not None and "head's target came from outside" in why and "/tree/srv.py" in why
    # rank 1 of a multi-rank case, likewise
    ranks = served("/w/head/tp.py", rank1="/tree/tp.py")
    assert target_files(ranks) == ["/w/head/tp.py", "/tree/tp.py"]
    assert check(served("/w/base/tp.py"), ranks, {"base": B, "head": H}) is not None
