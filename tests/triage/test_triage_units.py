"""Units of the triage that need no worker: the selection's bad inputs on a real scratch
repository, coverage from another revision, and git's diff of a rename, a deletion and a
binary file."""

from __future__ import annotations

from pathlib import Path

import pytest
from triagerepo import make_repo

from harness.cases import build_plan, load_suite
from harness.compare.diff import changed_lines, parse_diff
from harness.compare.select import select_changed
from harness.compare.triage import triage_case
from harness.execution.coverage import to_record
from harness.model import Attempt
from harness.model.coverage import CoverageRecord, read_lines, spell_lines


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_repo(tmp_path_factory.mktemp("triage-units"))


def test_line_sets_round_trip() -> None:
    lines = [1, 2, 3, 7, 9, 10]
    assert spell_lines(lines) == "1-3,7,9-10" and sorted(read_lines("1-3,7,9-10")) == lines


def test_a_revision_that_does_not_resolve_is_an_error_and_every_case_runs(
    env: dict[str, Path],
) -> None:
    suite = load_suite([env["repo"] / "cases"])
    items = build_plan(suite.cases, ["cpu"], None)
    kept, sel = select_changed(items, "no-such-rev", env["root"] / "nowhere", env["repo"])
    assert kept == items and sel["applied"] is False
    assert "revision 'no-such-rev' does not resolve" in sel["error"], sel
    diff = changed_lines(env["repo"], "base", "no-such-rev")
    assert diff.error is not None and "'no-such-rev' does not resolve" in diff.error


def test_coverage_from_another_revision_is_refused_naming_it(env: dict[str, Path]) -> None:
    changes = changed_lines(env["repo"], "base", "breaks")
    stale = CoverageRecord(status="recorded", rev="0" * 40, files={"mini/loader.py": "1-5"})
    t = triage_case(stale, stale, changes)
    assert t["status"] == "no_coverage"
    assert "coverage recorded at revision 000000000000, not base's" in t["summary"], t


def test_git_diff_of_renames_deletions_and_binary_files(env: dict[str, Path]) -> None:
    changes = changed_lines(env["repo"], "base", "elsewhere")
    by = {f.path: f for f in changes.files}
    assert by["mini/extra_renamed.py"].old_path == "mini/extra.py"
    assert by["mini/gone.py"].status == "deleted" and by["mini/gone.py"].removed == {1}
    assert by["assets/logo.bin"].status == "binary" and not by["assets/logo.bin"].python
    assert sorted(by["mini/loader.py"].added) == [9, 10]
    # git's quoting of unusual names is undone
    quoted = '"a/x\\303\\251 y.py" "b/x\\303\\251 y.py"'
    (change,) = parse_diff(f"diff --git {quoted}\nold mode 100644\nnew mode 100755\n")
    assert change.path == "xé y.py" and change.status == "modified"
    (change,) = parse_diff("diff --git a/sp ace.py b/sp ace.py\n--- a/sp ace.py\n"
                           "+++ b/sp ace.py\n@@ -2,0 +3,2 @@\n")  # fmt: skip
    assert change.path == "sp ace.py" and change.added == {3, 4} and not change.removed


def test_a_code_root_outside_the_repository_is_named_and_never_read_as_untouched(
    env: dict[str, Path],
) -> None:
    suite = load_suite([env["repo"] / "cases"])
    (ext,) = [i for i in build_plan(suite.cases, ["cpu"], None) if i.case.id == "ext"]
    outside = str((env["repo"] / "ext").resolve())  # the symlink's target
    raw = {"files": {f"{outside}/extmod.py": [5, 6], str(env["repo"] / "mini/loader.py"): [2]}}
    attempt = Attempt("ext", "cpu", 0, "passed", 0)
    record = to_record(raw, attempt, case=ext.case, repo=env["repo"], rev=None, sources=[outside])
    assert record.outside == (outside,) and list(record.files) == ["mini/loader.py"]
    assert f"case 'ext': code root(s) {outside} lie outside the repository" in (
        record.message or ""
    )
    t = triage_case(None, record, changed_lines(env["repo"], "base", "breaks"), sides=("head",))
    assert t["status"] == "outside" and "not known beyond it" in t["summary"], t


def test_two_saved_runs_are_triaged_only_with_coverage_and_their_commits(
    env: dict[str, Path],
) -> None:
    from harness.compare.triage import saved_changes
    from harness.model import CaseResult, RunReport

    def run(sha: str | None, coverage: CoverageRecord | None) -> RunReport:
        case = CaseResult("load", "loader", "cpu", "failed", coverage=coverage)
        env_ = {"git": {"sha": sha}} if sha else {}
        return RunReport("r", "", "", (), "cpu", env_, (case,))

    base = git_sha(env, "base")
    head = git_sha(env, "breaks")
    assert saved_changes({"base": run(base, None), "head": run(head, None)}, env["repo"]) is None
    cov = CoverageRecord(status="recorded", rev=head, files={"mini/loader.py": "4"})
    unknown = saved_changes({"base": run(None, None), "head": run(head, cov)}, env["repo"])
    assert (
        unknown is not None
        and unknown.error == "base's run records no git commit: no diff to triage"
    )
    changes = saved_changes({"base": run(base, None), "head": run(head, cov)}, env["repo"])
    assert changes is not None and changes.error is None
    t = triage_case(None, cov, changes)
    assert t["status"] == "executes" and "base: no coverage recorded" in t["summary"], t


def git_sha(env: dict[str, Path], rev: str) -> str:
    from triagerepo import git

    return git(env["repo"], "rev-parse", rev)


def test_a_command_case_gets_no_coverage_attempt_and_says_why(tmp_path: Path) -> None:
    from harness.execution.coverage import coverage_attempt
    from harness.execution.executor import Executor
    from harness.execution.workers import SideSpec
    from harness.platforms.profile import Profile

    case = tmp_path / "cmd.toml"
    case.write_text('id = "cmd"\nkind = "pipeline"\ncommand = ["true"]\n')
    (item,) = build_plan(load_suite([case]).cases, ["cpu"], None)
    ex = Executor(run_dir=tmp_path, profile=Profile(), sides={"head": SideSpec("head")})
    said: list[str] = []
    try:
        record = coverage_attempt(ex, "head", item, roots=(), profile=Profile(), say=said.append)
    finally:
        ex.close()
    assert record.status == "not_measured" and ex.pool.started == 0  # nothing was run
    assert record.message == (
        "not measured: its code runs in other processes (a command, a server, ranks)"
    )
    assert said == [f"{item.name} coverage: not measured ({record.message[14:]})"]
