"""GitHub Actions: workflow-command escaping, annotations (file, line, cap), the step summary
(appended, sized to what is left, a failure only a warning) and where a case's table is."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from reportdata import attempt, case, check, comparison, regression, report

from harness.cases import load_file
from harness.cases.load import case_lines
from harness.report.github import (
    Annotation,
    annotation_path,
    append_step_summary,
    comparison_annotations,
    escape_data,
    escape_property,
    format_annotations,
    publish_run,
    run_annotations,
)
from harness.report.markdown import STEP_SUMMARY_LIMIT


def test_messages_and_properties_are_escaped_by_githubs_rules() -> None:
    assert escape_data("100% done\r\nnext") == "100%25 done%0D%0Anext"
    assert escape_property("a:b,c%\n") == "a%3Ab%2Cc%25%0A"
    injected = Annotation(
        "error",
        "bad\n::warning::forged\r\n%0A",
        title="loader/x[cpu], with: colon",
        file="cases/a,b:c.toml",
        line=7,
    )
    command = injected.command()
    assert command == (
        "::error file=cases/a%2Cb%3Ac.toml,line=7,title=loader/x[cpu]%2C with%3A colon"
        "::bad%0A::warning::forged%0D%0A%250A"
    )
    assert "\n" not in command and "\r" not in command
    assert Annotation("notice", "m").command() == "::notice::m"


def test_failures_are_errors_and_flaky_and_warn_results_are_warnings_worst_first() -> None:
    ssim = check("ssim(video)", 0.91, ">=", 0.98, False)
    run = report(
        case("warned", checks=(check("psnr(video)", 30.0, ">=", 35, False, "warn"),)),
        case("wobbly", "flaky", attempts=(attempt("w", "timeout", "timed out"),)),
        case("sim", simulated=True, reason="simulated"),
        case("bad-ssim", "failed", checks=(ssim,)),
        case("ok"),
    )
    found = run_annotations(run, lines={"bad-ssim": 12})
    assert [(a.level, a.title) for a in found] == [
        ("error", "loader/bad-ssim[cpu]"),
        ("warning", "loader/wobbly[cpu]"),
        ("warning", "loader/warned[cpu]"),
    ]
    bad = found[0]
    assert (bad.file, bad.line) == ("cases/x.toml", 12)
    assert bad.message.splitlines()[0] == ("failed: ssim(video) obtained 0.91, required >= 0.98")
    assert "ssim(video): FAILED, obtained 0.91, required >= 0.98" in bad.message
    assert "timed out" in found[1].message


def test_annotations_are_capped_at_ten_per_level_with_a_notice_of_the_rest() -> None:
    run = report(
        *(case(f"bad-{i:02d}", "failed") for i in range(25)),
        *(case(f"flaky-{i}", "flaky") for i in range(3)),
    )
    commands = format_annotations(run_annotations(run))
    errors = [c for c in commands if c.startswith("::error ")]
    warnings = [c for c in commands if c.startswith("::warning ")]
    assert len(errors) == 10 and len(warnings) == 3
    assert "title=loader/bad-00[cpu]" in errors[0] and "title=loader/bad-09[cpu]" in errors[-1]
    (notice,) = [c for c in commands if c.startswith("::notice")]
    assert "15 more error(s) not annotated (GitHub shows 10 per step)" in notice
    assert not any(c.startswith("::notice") for c in format_annotations(run_annotations(report())))


def test_case_files_that_did_not_load_and_harness_faults_are_errors_too() -> None:
    from harness.model import LoadError

    run = report(
        load_errors=(
            LoadError("cases/bad.toml", "not valid TOML: Invalid value (at line 4, column 9)"),
        ),
        infra_errors=("worker 123 broke the protocol",),
    )
    load, fault = run_annotations(run)
    assert (load.level, load.file, load.line) == ("error", "cases/bad.toml", 4)
    assert (fault.level, fault.file, fault.title) == ("error", None, "harness error")


def test_comparison_annotations_point_regressions_at_the_case_file() -> None:
    from reportdata import case_comparison

    cmp = comparison(
        regression("slow"), case_comparison("same", "no_change"), case_comparison("s", "suspect")
    )
    found = comparison_annotations(cmp, sources={"slow": ("cases/p.toml", 3)})
    assert [(a.level, a.title, a.file, a.line) for a in found] == [
        ("error", "pipeline/slow[cpu]", "cases/p.toml", 3),
        ("warning", "pipeline/s[cpu]", None, None),
    ]
    assert "DenoisingStage regression +31.0% [+22.0%, +40.0%]" in found[0].message
    assert "first divergence: stage at denoise.step00 (step 0)" in found[0].message


def test_paths_are_relative_to_the_workspace_when_inside_it(tmp_path: Path) -> None:
    inside = tmp_path / "cases" / "a.toml"
    assert annotation_path(str(inside), str(tmp_path)) == "cases/a.toml"
    assert annotation_path("/elsewhere/a.toml", str(tmp_path)) == "/elsewhere/a.toml"
    assert annotation_path("cases/a.toml", None) == "cases/a.toml"


def test_the_line_of_each_case_table_is_found_in_the_text(tmp_path: Path) -> None:
    text = textwrap.dedent(
        """\
        # comment
        [[case]]  # first
        id = "one"
        kind = "loader"
        target = "m:f"
        [case.params]
        id = "not-a-case"

        [[case.checks]]
        metric = "note.x"
        op = "=="
        threshold = 1

        [[ case ]]
        kind = "loader"
        'id' = 'two'
        target = "m:f"
        """
    )
    assert case_lines(text) == {"one": 2, "two": 14}
    assert case_lines('id = "solo"\nkind = "loader"\n') == {"solo": 1}
    path = tmp_path / "c.toml"
    path.write_text(text.replace('id = "not-a-case"', "x = 1"))
    assert [(c.id, c.line) for c in load_file(path)] == [("one", 2), ("two", 14)]


def test_the_summary_is_appended_never_overwritten(tmp_path: Path) -> None:
    target = tmp_path / "summary.md"
    target.write_text("earlier step\n")
    env = {"GITHUB_STEP_SUMMARY": str(target)}
    assert append_step_summary(lambda n: "### one\n", env) is None
    assert append_step_summary(lambda n: "### two\n", env) is None
    assert target.read_text() == "earlier step\n\n### one\n\n### two\n"
    assert append_step_summary(lambda n: "x", {}) is None  # not set: nothing to do


def test_the_summary_is_sized_to_what_the_limit_leaves(tmp_path: Path) -> None:
    target = tmp_path / "summary.md"
    target.write_bytes(b"x" * (STEP_SUMMARY_LIMIT - 50_000))
    env = {"GITHUB_STEP_SUMMARY": str(target)}
    many = report(*(case(f"bad-{i:05d}-{'y' * 40}", "failed") for i in range(2000)))
    from harness.report.markdown import summary_markdown

    assert append_step_summary(lambda n: summary_markdown(many, max_bytes=n), env) is None
    assert STEP_SUMMARY_LIMIT - 50_000 < target.stat().st_size <= STEP_SUMMARY_LIMIT
    assert "**Truncated:**" in target.read_text()
    before = target.stat().st_size
    warning = append_step_summary(lambda n: "more", env)
    assert warning is not None and "no room left" in warning
    assert target.stat().st_size == before


def test_a_summary_that_cannot_be_written_is_a_warning_not_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = report(case("bad", "failed"))
    # a folder where the file should be (root can no more append to one than anyone)
    publish_run(run, environ={"GITHUB_STEP_SUMMARY": str(tmp_path), "GITHUB_ACTIONS": "true"})
    out, err = capsys.readouterr()
    assert f"warning: GITHUB_STEP_SUMMARY {tmp_path}: cannot append the summary" in err
    assert "::error file=cases/x.toml,title=loader/bad[cpu]::failed" in out  # still annotated
    under_a_file = tmp_path / "file"
    under_a_file.write_text("")
    warning = append_step_summary(lambda n: "x", {"GITHUB_STEP_SUMMARY": str(under_a_file / "s")})
    assert warning is not None and "GITHUB_STEP_SUMMARY" in warning


def test_outside_github_actions_nothing_is_printed(capsys: pytest.CaptureFixture[str]) -> None:
    publish_run(report(case("bad", "failed")), environ={})
    assert capsys.readouterr() == ("", "")
