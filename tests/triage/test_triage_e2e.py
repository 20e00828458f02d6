"""Diff-aware triage and ``harness explain`` end to end through the CLI, on a scratch
repository (tests/triage/triagerepo.py): a head whose change lies in files the failing case
never executes (it fails on a timing guard on both sides), and a head that breaks the line
the loader case runs. Then ``harness run --changed-since`` with the coverage the breaking
head's comparison recorded at base, and coverage from another revision refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from triagerepo import compare, git, harness, make_repo

from harness.cases import build_plan, load_suite
from harness.cli import main as cli_main
from harness.compare.select import select_changed
from harness.model import Comparison
from harness.report.schema import validate_comparison, validate_report

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("triage-e2e")]

LOAD, TIMING, EXT = "loader/load[cpu]", "pipeline/timing[cpu]", "quant/ext[cpu]"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_repo(tmp_path_factory.mktemp("triage-e2e"))


def _checked(result: tuple[int, dict[str, Any] | None, str, Path]) -> dict[str, Any]:
    code, doc, out, folder = result
    assert doc is not None, out[-4000:]
    validate_comparison(doc)
    assert Comparison.from_json(doc).to_json() == doc
    for side in ("base", "head"):
        validate_report(json.loads((folder / side / "report.json").read_text()))
    return {"code": code, "doc": doc, "out": out, "dir": folder,
            "cases": {c["kind"] + "/" + c["id"] + "[cpu]": c for c in doc["cases"]}}  # fmt: skip


@pytest.fixture(scope="module")
def breaks(env: dict[str, Path]) -> dict[str, Any]:
    return _checked(compare(env, "breaks"))


@pytest.fixture(scope="module")
def elsewhere(env: dict[str, Path]) -> dict[str, Any]:
    return _checked(compare(env, "elsewhere", "-k", "timing"))


def test_a_head_that_breaks_the_code_the_case_runs_is_first_and_says_which_lines(
    breaks: dict[str, Any],
) -> None:
    cases, out = breaks["cases"], breaks["out"]
    assert breaks["code"] == 1, out[-3000:]
    load, timing = cases[LOAD], cases[TIMING]
    assert load["verdict"] == "new_failure" and timing["verdict"] == "pre_existing_failure"
    assert load["triage"]["status"] == "executes", load["triage"]
    assert load["triage"]["summary"].startswith(
        "executes 1 of head's 1 changed Python lines (mini/loader.py:4)"
    ), load["triage"]
    assert timing["triage"]["status"] == "none"
    assert timing["triage"]["summary"] == "executes none of head's changed Python lines"
    # findings ordered by it: the case that executes head's change first, none of it last
    order = [c["kind"] + "/" + c["id"] + "[cpu]" for c in breaks["doc"]["cases"]]
    assert order == [LOAD, TIMING], order
    diff = breaks["doc"]["diff"]
    assert [(f["path"], f["status"], f["added"]) for f in diff["files"]] == [
        ("mini/loader.py", "modified", "4")
    ]
    # every rendering says it
    summary = (breaks["dir"] / "summary.md").read_text()
    assert "head's changed lines executed" in summary and "1 of 1 (mini/loader.py:4)" in summary
    page = (breaks["dir"] / "index.html").read_text()
    assert "executes 1 of head&#39;s 1 changed Python lines (mini/loader.py:4)" in page
    assert "triage: executes 1 of head's 1 changed Python lines" in out


def explain(folder: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """``harness explain FOLDER`` through the CLI's entry point (in this process: one less
    interpreter start), its page printed for the record (``pytest -s``)."""
    capsys.readouterr()
    assert cli_main(["explain", str(folder)]) == 0
    page = capsys.readouterr().out
    with capsys.disabled():
        print(f"\n{page}")
    return page


def test_harness_explain_of_the_breaking_head_puts_the_case_that_runs_it_first(
    breaks: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    page = explain(breaks["dir"], capsys)
    first = page.index(f"### 1. `{LOAD}`: new_failure: likely head's change")
    last = page.index(f"### 2. `{TIMING}`: pre_existing_failure: unlikely head's change")
    block = page[first:last]
    assert "**new or pre-existing**: new on head (new_failure)" in block
    assert "**infrastructure or code**: code: CheckFailed" in block
    assert "**head's changed lines executed**: executes 1 of head's 1 changed Python" in block
    assert "**first departure from the reference**: no layered reference" in block
    assert "**environment differences**: none (same runner, same packages)" in block
    assert "code: AssertionError: timing guard" in page[last:]
    assert "executes none of head's changed Python lines" in page[last:]
    # harness compare appended the same page to its summary; the HTML page is offline
    assert page in (breaks["dir"] / "summary.md").read_text()
    html = (breaks["dir"] / "explain.html").read_text()
    assert "Content-Security-Policy" in html and "likely head&#39;s change" in html


def test_a_head_whose_change_the_failing_case_never_executes_says_so(
    elsewhere: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    assert elsewhere["code"] == 0, elsewhere["out"][-3000:]  # pre-existing: not head's
    timing = elsewhere["cases"][TIMING]
    assert timing["verdict"] == "pre_existing_failure"
    assert timing["triage"]["summary"] == (
        "executes none of head's changed Python lines; head also changed non-Python files: "
        "assets/logo.bin, docs/notes.md"
    ), timing["triage"]
    # git's own diff: a rename, a deletion, a binary file, an added file, a modified one
    files = {f["path"]: f for f in elsewhere["doc"]["diff"]["files"]}
    assert files["mini/extra_renamed.py"]["old_path"] == "mini/extra.py"
    assert files["mini/extra_renamed.py"]["status"] == "renamed"
    assert files["mini/gone.py"]["status"] == "deleted" and files["mini/gone.py"]["removed"]
    assert files["assets/logo.bin"]["status"] == "binary"
    assert files["docs/notes.md"]["status"] == "added"
    page = explain(elsewhere["dir"], capsys)
    assert "1 red case(s)" in page
    assert (
        f"### 1. `{TIMING}`: pre_existing_failure: unlikely head's change: executes none of it"
        in page
    )
    assert "**new or pre-existing**: pre-existing: base fails alike" in page
    assert "head also changed non-Python files: assets/logo.bin, docs/notes.md" in page


def test_changed_since_runs_the_cases_whose_coverage_touches_the_change(
    env: dict[str, Path], breaks: dict[str, Any]
) -> None:
    work = env["root"] / "wt-elsewhere"
    git(env["repo"], "worktree", "add", "-q", "--detach", str(work), "elsewhere")
    coverage = breaks["dir"] / "base"
    args = ["run", "cases", "--code-root", "mini", "--runner", str(env["runner"]),
            "--out", str(env["runs"]), "-q", "--coverage-from", str(coverage)]  # fmt: skip
    proc = harness(*args, "--run-id", "sel", "--changed-since", "base", cwd=work)
    assert "2 of 3 item(s) run, 1 left out" in proc.stderr, proc.stderr[-3000:]
    assert f"left out {TIMING}: its coverage recorded at" in proc.stderr
    sel = json.loads((env["runs"] / "sel" / "report.json").read_text())
    validate_report(sel)
    assert sorted(c["id"] for c in sel["cases"]) == ["ext", "load"]
    kept = {k["name"]: k["why"] for k in sel["selection"]["kept"]}
    assert kept == {LOAD: "executes changed file(s) mini/loader.py", EXT: "no coverage on record"}
    assert sel["selection"]["left_out"][0]["name"] == TIMING


def test_changed_since_refuses_coverage_recorded_at_another_revision(
    env: dict[str, Path], breaks: dict[str, Any]
) -> None:
    items = build_plan(load_suite([env["repo"] / "cases"]).cases, ["cpu"], None)
    kept, sel = select_changed(items, "elsewhere", breaks["dir"] / "base", env["repo"])
    base_sha = git(env["repo"], "rev-parse", "base")
    assert kept == items and sel["applied"] is False
    assert f"coverage recorded at revision {base_sha[:12]}, not at --changed-since" in sel["error"]
