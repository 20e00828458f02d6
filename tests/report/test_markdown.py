"""summary.md of a run and of a comparison: verdict line first, attention table, the rest
collapsed, escaping, and the 1 MiB step-summary limit."""

from __future__ import annotations

from reportdata import (
    attempt,
    case,
    case_comparison,
    check,
    comparison,
    hang_case,
    html,
    regression,
    report,
    table_rows,
)

from harness.model import Divergence, FailureMatrix
from harness.report.comparison_md import comparison_markdown
from harness.report.markdown import STEP_SUMMARY_LIMIT, md_text, summary_markdown


def _mixed_report():  # type: ignore[no-untyped-def]
    ssim = check("ssim(video)", 0.91, ">=", 0.98, False)
    return report(
        case("ok-1"),
        case("ok-2"),
        case("bad-ssim", "failed", checks=(ssim,), reason="check ssim(video) failed"),
        case(
            "boom",
            "error",
            attempts=(attempt("boom", "error", "shape mismatch (3, 4)\nsecond line"),),
        ),
        case(
            "wobbly",
            "flaky",
            attempts=(
                attempt("wobbly", "timeout", "timed out after 60 s", 0),
                attempt("wobbly", "passed", index=1),
            ),
        ),
        case("warned", checks=(check("psnr(video)", 30.0, ">=", 35, False, "warn"),)),
        case("sim", simulated=True, reason="no CUDA device: simulated"),
        case("skip-me", "skipped", attempts=()),
    )


def test_the_first_line_is_the_verdict_with_counts_platform_simulated_and_duration() -> None:
    md = summary_markdown(_mixed_report())
    first = md.splitlines()[0]
    assert first == (
        "### ❌ 1 error, 1 failed, 1 flaky, 1 skipped, 4 passed on cpu (1 simulated) in 2m31s"
    )
    assert summary_markdown(report(case("a"))).splitlines()[0] == "### ✅ 1 passed on cpu in 2m31s"
    only_flaky = report(case("a", "flaky"), case("b"))
    assert summary_markdown(only_flaky).startswith("### ⚠️ 1 flaky, 1 passed")


def test_attention_table_lists_worst_first_with_obtained_threshold_and_first_error() -> None:
    md = summary_markdown(_mixed_report())
    rows = table_rows(md)
    header, *attention = rows[: rows.index(["case", "status", "attempts", "time"])]
    assert header == ["", "case", "status", "check", "obtained", "required", "first error"]
    names = [r[1] for r in attention]
    assert names == [
        "`loader/boom[cpu]`",
        "`loader/bad-ssim[cpu]`",
        "`loader/wobbly[cpu]`",
        "`loader/warned[cpu]`",
        "`loader/sim[cpu]`",
    ]
    by_name = {r[1].strip("`"): r for r in attention}
    bad = by_name["loader/bad-ssim[cpu]"]
    assert bad[2:6] == ["failed", "`ssim(video)`", "0.91", "\\>= 0.98"]
    # the first line of the error only, marked as having more
    assert by_name["loader/boom[cpu]"][6] == "`ValueError: shape mismatch (3, 4) ...`"
    # a flaky case shows its first failure, not the pass that followed
    assert "timed out after 60 s" in by_name["loader/wobbly[cpu]"][6]
    assert by_name["loader/warned[cpu]"][2:6] == [
        "passed, warning",
        "`psnr(video)`",
        "30",
        "\\>= 35 (warn)",
    ]
    assert by_name["loader/sim[cpu]"][2] == "passed (simulated)"
    assert "no CUDA device" in by_name["loader/sim[cpu]"][6]


def test_the_rest_is_collapsed_in_details() -> None:
    md = summary_markdown(_mixed_report())
    assert "<details><summary>1 skipped, 2 passed</summary>" in md
    after = md.split("<details>", 1)[1]
    assert "loader/ok-1[cpu]" in after and "loader/skip-me[cpu]" in after
    assert "loader/bad-ssim[cpu]" not in after
    assert md.rstrip().endswith("</details>")


def test_script_tags_pipes_and_line_breaks_in_names_and_errors_stay_text() -> None:
    nasty = "<script>alert(1)</script>"
    bad = case(
        nasty,
        "error",
        kind="load|er",
        attempts=(attempt("x", "error", f"{nasty} | <b>bold</b> *em* @someone\nline 2"),),
        reason=f"{nasty}\n| broken row",
    )
    md = summary_markdown(report(bad, case("a|b`c")))
    rendered = html(md)
    assert "<script>" not in rendered and "<b>" not in rendered
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in rendered
    rows = table_rows(md)
    assert all(len(r) == 7 for r in rows[:2]), rows
    assert all(len(r) == 4 for r in rows[2:]), rows
    assert "<code>load|er/&lt;script&gt;alert(1)&lt;/script&gt;[cpu]</code>" in rendered
    # a backtick in a name cannot end its code span
    assert "<code>loader/a|b`c[cpu]</code>" in rendered
    # free text is backslash-escaped: no emphasis, no HTML
    assert md_text("<i>x</i> *y* | z") == "\\<i\\>x\\</i\\> \\*y\\* \\| z"
    assert "<em>" not in html(md_text("*y*"))
    # an underscore inside a word cannot start emphasis and stays as it is
    assert md_text("pre_existing_failure _em_") == "pre_existing_failure \\_em\\_"
    assert "<em>" not in html(md_text("_em_ pre_existing_failure"))


def test_a_5000_case_report_stays_under_the_step_summary_limit_and_says_it_was_cut() -> None:
    long_error = "RuntimeError: " + "x" * 400
    long_id = "-with-a-long-parametrized-name-" + "y" * 60
    cases = [
        case(
            f"case-{i:04d}{long_id}",
            "failed" if i % 2 else "passed",
            checks=(check("ssim(video)", 0.5, ">=", 0.98, False),) if i % 2 else (),
            attempts=(attempt("c", "failed", long_error),) if i % 2 else None,
        )
        for i in range(5000)
    ]
    md = summary_markdown(report(*cases))
    assert len(md.encode()) < STEP_SUMMARY_LIMIT
    assert md.startswith("### ❌ 2500 failed, 2500 passed on cpu")
    note = md.rstrip().splitlines()[-1]
    assert note.startswith("**Truncated:**") and "report.json" in note
    shown = sum(1 for r in table_rows(md) if any(c.startswith("`loader/case-") for c in r))
    left_out = int(note.split("**Truncated:** ", 1)[1].split()[0])
    assert shown + left_out == 5000 and shown > 1000
    assert md.count("<details>") == md.count("</details>")
    # a smaller limit (say, what is left of a step summary) is kept too
    small = summary_markdown(report(*cases), max_bytes=20_000)
    assert len(small.encode()) <= 20_000 and "**Truncated:**" in small
    # and an attention row is never cut in half: every table row still has its 7 cells
    assert all(len(r) == 7 for r in table_rows(small))


def test_comparison_lists_regressions_and_new_failures_first_with_ratio_and_divergence() -> None:
    new_failure = case_comparison(
        "nan-audio",
        "new_failure",
        failures=FailureMatrix("new_failure", 3, 0, 0, 3),
        divergence=Divergence("nonfinite", "audio.pcm", {"side": "head"}),
    )
    cmp = comparison(
        case_comparison("same-1", "no_change"),
        case_comparison("fixed-1", "fixed"),
        regression("slow-denoise"),
        new_failure,
        case_comparison("same-2", "no_change"),
    )
    md = comparison_markdown(cmp)
    first = md.splitlines()[0]
    assert first.startswith("### ❌ 1 new failure, 1 regression, 1 fixed, 2 no change: head `HEAD`")
    assert "vs base `main` on runner `cpu`, 3 round(s)" in first
    rows = table_rows(md)
    names = [r[1] for r in rows if r and r[1].startswith("`")]
    assert names[:3] == [
        "`pipeline/nan-audio[cpu]`",
        "`pipeline/slow-denoise[cpu]`",
        "`pipeline/fixed-1[cpu]`",
    ]
    slow = next(r for r in rows if r[1] == "`pipeline/slow-denoise[cpu]`")
    assert slow[3] == "DenoisingStage regression +31.0% \\[+22.0%, +40.0%\\]"
    assert slow[6] == "stage at `denoise.step00` (step 0)"
    nan = next(r for r in rows if r[1] == "`pipeline/nan-audio[cpu]`")
    assert nan[6] == "nonfinite at `audio.pcm` (on head)"
    assert "<details><summary>2 no change</summary>" in md
    assert md.index("same-1") > md.index("<details>")


def test_comparison_escapes_names_and_reasons_and_keeps_under_its_limit() -> None:
    weird = case_comparison(
        "<script>x</script>|y", "regression", reason="<img src=x onerror=alert(1)>\n| row"
    )
    md = comparison_markdown(comparison(weird))
    rendered = html(md)
    assert "<script>" not in rendered and "<img" not in rendered
    assert all(len(r) == 8 for r in table_rows(md))
    many = comparison(*(regression(f"c{i:04d}-{'x' * 60}") for i in range(5000)))
    big = comparison_markdown(many)
    assert len(big.encode()) < STEP_SUMMARY_LIMIT and "**Truncated:**" in big


def test_a_hang_diagnosis_shows_every_rank_its_log_and_its_stacks() -> None:
    md = summary_markdown(report(case("ok"), hang_case()))
    assert (
        "**Hang diagnosis** of `server/tp2-hang[cpu]` attempt #0: readiness timeout, captured "
        "in 1.6 s (deadline 10 s) before the kill; not retried: a readiness timeout is never "
        "retried (platform policy)"
    ) in md
    rows = table_rows(md)
    start = rows.index(["pid", "rank", "CPU %", "log growing", "last log line", "stuck in",
                        "stacks by"])  # fmt: skip
    rank0, rank1 = rows[start + 1 : start + 3]
    assert rank0[:4] == ["100", "0", "0", "no"]
    assert rank1[:4] == ["101", "1", "99.5", "yes (+40 B)"]
    # the log line stays one cell and text, with its age
    assert rank1[4] == "`rank 1: tile 3 | decode <b>` (1.2 s ago)"
    assert rank0[5] == "`all_reduce (serve.py:40)`"
    # the stacks, folded, as fenced text; markup in them stays text
    assert "<details><summary>stacks of 2 process(es), device</summary>" in md
    assert '```text\nThread 101 (idle): "MainThread"\n    decode_tile (serve.py:41)' in md
    assert "<script>" not in html(md)
