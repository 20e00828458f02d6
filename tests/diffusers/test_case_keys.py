"""The two case-file keys the diffusers cases need: ``code_root`` (the case's own scenario
package, relative to the repository) and ``requires`` (modules it needs; a worker that cannot
find one skips the case with that reason). Real files, real workers."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from conftest import by_id, harness, report

from harness.cases.load import load_file
from harness.errors import CaseFileError
from harness.model import case_from_json, case_to_json

TMOD = textwrap.dedent(
    """
    from harness import probe

    def ok():
        probe.note("ran", True)
    """
)


def write_case(path: Path, extra: str, target: str = "tmod:ok", id: str = "c") -> Path:
    path.write_text(
        f'[[case]]\nid = "{id}"\nkind = "pipeline"\ntarget = "{target}"\n{extra}\n',
        encoding="utf-8",
    )
    return path


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ('code_root = "../elsewhere"', "no '..'"),
        ('code_root = "/abs/path"', "relative to the repository root"),
        ('code_root = "a//b"', "relative to the repository root"),
        ('code_root = "a\\\\b"', "'/' separators"),
        ("code_root = 3", "string (a folder relative to the repository root), got int"),
        ('requires = ["diffusers", "not a module"]', "not names: ['not a module']"),
        ('requires = "diffusers"', "list of module names, got str"),
        ("requires = [1]", "a list of strings"),
    ],
)
def test_bad_values_are_rejected_naming_file_case_and_key(
    tmp_path: Path, extra: str, expected: str
) -> None:
    path = write_case(tmp_path / "bad.toml", extra)
    with pytest.raises(CaseFileError) as err:
        load_file(path)
    msg = str(err.value)
    key = extra.split(" ")[0]
    assert str(path) in msg and "case 'c'" in msg and f"'{key}'" in msg, msg
    assert expected in msg, msg


def test_good_values_load_and_survive_the_worker_protocol(tmp_path: Path) -> None:
    path = write_case(
        tmp_path / "ok.toml", 'code_root = "./targets/x/"\nrequires = ["diffusers", "a.b_c"]'
    )
    (case,) = load_file(path)
    assert case.code_root == "targets/x"
    assert case.requires == ("diffusers", "a.b_c")
    assert case_from_json(case_to_json(case)) == case


def test_a_case_finds_its_code_root_without_any_code_root_flag(tmp_path: Path) -> None:
    (tmp_path / "scen").mkdir()
    (tmp_path / "scen" / "tmod.py").write_text(TMOD)
    (tmp_path / "cases").mkdir()
    write_case(tmp_path / "cases" / "a.toml", 'code_root = "scen"')
    proc = harness("run", "cases", "--out", "runs", "--run-id", "r", "-q", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (case,) = report(tmp_path / "runs" / "r")["cases"]
    assert case["status"] == "passed"
    assert case["attempts"][0]["notes"]["harness.target_file"] == str(
        (tmp_path / "scen" / "tmod.py").resolve()
    )


def test_a_missing_code_root_is_an_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / "cases").mkdir()
    write_case(tmp_path / "cases" / "a.toml", 'code_root = "targets/nowhere"')
    proc = harness("run", "cases", "--out", "runs", "--run-id", "r", "-q", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr[-3000:]
    (case,) = report(tmp_path / "runs" / "r")["cases"]
    assert case["status"] == "error"
    error = case["attempts"][0]["error"]
    assert error["type"] == "CodeRootMissing"
    assert "code_root 'targets/nowhere' is not a folder" in error["message"]
    assert str(tmp_path / "targets" / "nowhere") in error["message"]


def test_requires_skips_with_the_missing_names_and_runs_what_is_there(tmp_path: Path) -> None:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "tmod.py").write_text(TMOD)
    (tmp_path / "cases").mkdir()
    write_case(
        tmp_path / "cases" / "a.toml",
        'requires = ["json", "no_such_module_d1f", "no_such_pkg_d1f.sub"]\nrepeats = 3',
        id="missing",
    )
    write_case(tmp_path / "cases" / "b.toml", 'requires = ["json", "email.mime"]', id="present")
    proc = harness(
        "run", "cases", "--code-root", "code", "--out", "runs", "--run-id", "r", cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    cases = by_id(report(tmp_path / "runs" / "r"))
    assert cases["present"]["status"] == "passed"
    missing = cases["missing"]
    assert missing["status"] == "skipped"
    reason = missing["reason"]
    assert "'no_such_module_d1f', 'no_such_pkg_d1f.sub'" in reason and "'json'" not in reason
    assert "cannot import" in reason
    # One attempt said so; the case was not run three times to be skipped three times.
    (attempt,) = missing["attempts"]
    assert attempt["status"] == "skipped" and "ran" not in attempt["notes"]
    junit = (tmp_path / "runs" / "r" / "junit.xml").read_text()
    assert "<skipped" in junit and "no_such_module_d1f" in junit


def test_each_side_resolves_a_case_code_root_in_its_own_checkout(tmp_path: Path) -> None:
    from harness.execution.workers import SideSpec

    path = write_case(tmp_path / "a.toml", 'code_root = "targets/x"')
    (case,) = load_file(path)
    base = SideSpec("base", cwd=str(tmp_path / "here"), repo=str(tmp_path / "wt-base"))
    head = SideSpec("head", cwd=str(tmp_path / "here"))
    assert base.case_root(case) == (tmp_path / "wt-base" / "targets" / "x").resolve()
    assert head.case_root(case) == (tmp_path / "here" / "targets" / "x").resolve()
    (plain,) = load_file(write_case(tmp_path / "b.toml", ""))
    assert base.case_root(plain) is None
