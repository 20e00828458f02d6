"""Values that used to pass validation and then crash the run or pass silently (issue #12).

Each input here is rejected where it is read: a case file or runner profile at load time, a
report.json before anything is rendered; and every name the loader accepts is one the run
really knows.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from harness import metrics, platforms
from harness.cases import load_file, load_suite
from harness.checks import CASE_LEVEL_METRICS, evaluate_attempt_checks
from harness.errors import CaseFileError, ProfileError, ReportFormatError
from harness.model import Case, CaseResult, CheckResult, CheckSpec, RunReport, vocab
from harness.platforms.profile import load_profile
from harness.report.io import read_report, write_run
from harness.report.markdown import summary_markdown

HEAD = "[[case]]\nid = 'c'\nkind = 'loader'\ntarget = 'm:f'\n"


def write(tmp_path: Path, body: str, name: str = "c.toml") -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(body))
    return p


# Each body follows HEAD, inside the one [[case]] table; the message part each must produce.
BAD_VALUES = [
    ("timeout_s = nan", "key 'timeout_s' = nan: expected a positive number of seconds, at most"),
    ("timeout_s = inf", "key 'timeout_s' = inf: expected a positive number of seconds, at most"),
    ("timeout_s = 1e10", "key 'timeout_s' = 10000000000.0: expected a positive number"),
    ("timeout_s = 86401", "at most 86400 (24 h)"),
    ("params = { when = 1979-05-27T07:32:00Z }", "key 'params.when' = datetime.datetime(1979"),
    ("params = { day = 1979-05-27 }", "key 'params.day' = datetime.date(1979, 5, 27)"),
    ("params = { at = 07:32:00 }", "TOML date or time does not survive JSON"),
    ("params = { x = nan }", "key 'params.x' = nan: expected a finite number"),
    ("params = { x = { y = [1, inf] } }", "key 'params.x.y[1]' = inf: expected a finite number"),
    ("repeats = 9223372036854775807", "key 'repeats' = 9223372036854775807: expected an integer "),
    ("repeats = 1001", "key 'repeats' = 1001: expected an integer from 1 to 1000"),
    ("warmup = 101", "key 'warmup' = 101: expected an integer from 0 to 100"),
    ("retries = 11", "key 'retries' = 11: expected an integer from 0 to 10"),
    ("retries = -1", "key 'retries' = -1: expected an integer from 0 to 10"),
    ("budget = { Denoise = inf }", "key 'budget.Denoise' = inf: expected a finite positive"),
    ("budget = { Denoise = nan }", "key 'budget.Denoise' = nan: expected a finite positive"),
    ("budget = { Denoise = 0 }", "key 'budget.Denoise' = 0: expected a finite positive"),
    (
        "platforms = ['cpuu']",
        "key 'platforms' = ['cpuu']: expected known platform names "
        "(cpu, cuda, hip, npu, xpu, mps); unknown: ['cpuu']",
    ),
    (
        "checks = [{ metric = 'ssim', op = '>=', threshold = 0.9, thresholds = { hpi = 0.8 } }]",
        "checks[0]: key 'thresholds.hpi': unknown platform 'hpi' (known: cpu, cuda, hip",
    ),
    (
        "checks = [{ metric = 'sssim', op = '>=', threshold = 0.9 }]",
        "checks[0]: key 'metric' = 'sssim': expected one of ssim, psnr, mae, max_abs, clip, "
        "audio_snr, audio_mad, audio_lsd, audio_lag_ms, identical_outputs, note.<key>",
    ),
    ("checks = [{ metric = 'note.', op = '==', threshold = 1 }]", "key 'metric' = 'note.'"),
    (
        "checks = [{ metric = 'note.x', op = '>=', threshold = 'fast' }]",
        "checks[0]: key 'threshold' = 'fast': expected a number ('>=' orders numbers), got str",
    ),
    (
        "checks = [{ metric = 'note.x', op = '<', threshold = true }]",
        "key 'threshold' = True: expected a number ('<' orders numbers), got bool",
    ),
    (
        "checks = [{ metric = 'ssim', op = '==', threshold = '1' }]",
        "key 'threshold' = '1': expected a number ('ssim' gives a number), got str",
    ),
    (
        "checks = [{ metric = 'note.x', op = '>=', threshold = 1, thresholds = { hip = 'a' } }]",
        "key 'thresholds.hip' = 'a': expected a number ('>=' orders numbers), got str",
    ),
    (
        "checks = [{ metric = 'psnr', op = '>=', threshold = nan }]",
        "key 'threshold' = nan: expected a finite number",
    ),
    (
        "checks = [{ metric = 'psnr', op = '!=', threshold = inf }]",
        "key 'threshold' = inf: expected a finite number",
    ),
    (
        "checks = [{ metric = 'identical_outputs', op = '==', threshold = 1 }]",
        "key 'threshold' = 1: expected true or false for identical_outputs, got int",
    ),
    (
        "checks = [{ metric = 'identical_outputs', op = '>=', threshold = true }]",
        "key 'op' = '>=': expected '==' or '!=' for identical_outputs",
    ),
    (
        "checks = [{ metric = 'ssim', op = '>=', threshold = 0.9, settings = { s = nan } }]",
        "checks[0]: key 'settings.s' = nan: expected a finite number",
    ),
    ("reference = '../elsewhere'", "key 'reference' = '../elsewhere': expected a reference id"),
]


@pytest.mark.parametrize(("body", "expected"), BAD_VALUES, ids=[b for b, _ in BAD_VALUES])
def test_value_that_would_crash_or_pass_silently_is_a_load_error(
    tmp_path: Path, body: str, expected: str
) -> None:
    path = write(tmp_path, HEAD + body + "\n", "bad.toml")
    with pytest.raises(CaseFileError) as info:
        load_file(path)
    message = str(info.value)
    assert message.startswith(f"{path}: case 'c'"), message
    assert expected in message, message


BAD_IDS = ["", ".hidden", "..", "a/b", "a b", "a\\b", "a[b]", "caf\u00e9", "a:b", "x\n"]


@pytest.mark.parametrize("case_id", BAD_IDS, ids=repr)
def test_id_outside_the_safe_character_set_is_a_load_error(tmp_path: Path, case_id: str) -> None:
    path = write(tmp_path, f"id = {json.dumps(case_id)}\nkind = 'loader'\ntarget = 'm:f'\n")
    with pytest.raises(CaseFileError, match=r"key 'id' = .*: expected a non-empty id of letters"):
        load_file(path)


@pytest.mark.parametrize("case_id", ["a", "t2va-int8", "v1.2_x", "-x", "_"])
def test_safe_ids_load(tmp_path: Path, case_id: str) -> None:
    (case,) = load_file(write(tmp_path, f"id = '{case_id}'\nkind = 'loader'\ntarget = 'm:f'\n"))
    assert case.id == case_id


BAD_TARGETS = [":f", "m:", "m", "m:f:g", "m.:f", ".m:f", "m..n:f", "m:f.g", "1m:f", "m:class"]


@pytest.mark.parametrize("target", BAD_TARGETS)
def test_target_must_be_dotted_module_colon_function(tmp_path: Path, target: str) -> None:
    path = write(tmp_path, f"id = 'x'\nkind = 'loader'\ntarget = '{target}'\n")
    with pytest.raises(CaseFileError, match=r"key 'target' = .*: expected a string \"module:"):
        load_file(path)


def test_dotted_module_target_loads(tmp_path: Path) -> None:
    (case,) = load_file(write(tmp_path, "id = 'x'\nkind = 'loader'\ntarget = 'a.b_c.d:run_1'\n"))
    assert case.target == "a.b_c.d:run_1"


def test_empty_case_array_is_a_load_error(tmp_path: Path) -> None:
    path = write(tmp_path, "case = []\n")
    with pytest.raises(CaseFileError, match="no case in file"):
        load_file(path)
    result = load_suite([path])
    assert not result.cases and len(result.errors) == 1


def test_values_at_the_bounds_load_and_survive_the_worker_json(tmp_path: Path) -> None:
    from harness.worker import protocol

    body = HEAD + (
        "repeats = 1000\nwarmup = 100\nretries = 10\ntimeout_s = 86400\n"
        "params = { s = 'x', i = -3, f = 0.5, b = true, l = [1, 'a'], t = { u = 1e300 } }\n"
        "checks = [\n"
        "  { metric = 'ssim', op = '>=', threshold = 0.9, thresholds = { hip = 0.8 } },\n"
        "  { metric = 'note.path', op = '==', threshold = 'eager', thresholds = { cuda = 'x' } },\n"
        "  { metric = 'note.n', op = '!=', threshold = true },\n"
        "  { metric = 'identical_outputs', op = '==', threshold = true },\n"
        "]\n"
    )
    (case,) = load_file(write(tmp_path, body))
    job = protocol.AttemptJob(
        case=case, platform="cpu", platform_chain=("cpu", "any"), index=0, seed=0
    )
    back = protocol.decode_request(protocol.encode(protocol.AttemptRequest("n", job)))
    assert isinstance(back, protocol.AttemptRequest) and back.job.case == case


def test_every_platform_the_loader_accepts_is_in_the_registry() -> None:
    assert platforms.names() == vocab.PLATFORMS


def test_every_metric_the_loader_accepts_is_one_the_checks_run(tmp_path: Path) -> None:
    assert set(vocab.QUALITY_METRICS) == set(metrics.names())
    assert set(vocab.CASE_LEVEL_METRICS) == set(CASE_LEVEL_METRICS)
    # No metric the loader accepts reaches the checks' "unknown metric" branch.
    checks = [
        CheckSpec(metric=m, op="==", threshold=True if m in CASE_LEVEL_METRICS else 1)
        for m in (*vocab.QUALITY_METRICS, *vocab.CASE_LEVEL_METRICS, "note.k")
    ]
    case = Case(id="c", kind="loader", source="c.toml", target="m:f", checks=tuple(checks))
    results = evaluate_attempt_checks(
        case,
        platform_chain=("cpu", "any"),
        outputs={},
        arrays={},
        notes={"k": 1},
        references_root=None,
        ran=True,
    )
    assert not [r for r in results if r.reason and "unknown metric" in r.reason]
    unknown = CheckSpec(metric="sssim", op=">=", threshold=1.0)
    (result,) = evaluate_attempt_checks(
        Case(id="c", kind="loader", source="c.toml", target="m:f", checks=(unknown,)),
        platform_chain=("cpu", "any"),
        outputs={},
        arrays={},
        notes={},
        references_root=None,
        ran=True,
    )
    assert result.reason and "unknown metric" in result.reason  # the loader must reject it


# --- runner profiles -------------------------------------------------------------------------

BAD_PROFILES = [
    ("platform = 'cpuu'", "key 'platform' = 'cpuu': expected one of cpu, cuda, hip"),
    ("time_budget_s = nan", "key 'time_budget_s' = nan: expected a finite positive number"),
    ("time_budget_s = inf", "key 'time_budget_s' = inf: expected a finite positive number"),
    ("time_budget_s = -5", "key 'time_budget_s' = -5: expected a finite positive number"),
    ("threads = 0", "key 'threads' = 0: expected an integer from 1 to 1024"),
    ("threads = 9223372036854775807", "key 'threads' = 9223372036854775807: expected an integer"),
    ("device_count = -1", "key 'device_count' = -1: expected an integer from 0 to 1024"),
    ("name = '../x'", "key 'name' = '../x': expected letters, digits"),
    ("[retry]\nretries = 11", "key 'retry.retries' = 11: expected an integer from 0 to 10"),
    ("[retry]\nretries = -1", "key 'retry.retries' = -1: expected an integer from 0 to 10"),
    ("[budgets.c]\nDenoise = nan", "key 'budgets.c.Denoise' = nan: expected a finite positive"),
    ("[budgets.c]\nDenoise = inf", "key 'budgets.c.Denoise' = inf: expected a finite positive"),
    ("[budgets.c]\nDenoise = 0", "key 'budgets.c.Denoise' = 0: expected a finite positive"),
]


@pytest.mark.parametrize(("body", "expected"), BAD_PROFILES, ids=[b for b, _ in BAD_PROFILES])
def test_bad_runner_profile_value_names_file_and_key(
    tmp_path: Path, body: str, expected: str
) -> None:
    path = write(tmp_path, body + "\n", "runner.toml")
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    assert str(info.value).startswith(f"{path}: "), str(info.value)
    assert expected in str(info.value)


def test_binary_runner_profile_is_an_input_error(tmp_path: Path) -> None:
    path = tmp_path / "runner.toml"
    path.write_bytes(b"\xcd\xff\x00binary")
    with pytest.raises(ProfileError, match=r"runner\.toml: cannot read runner profile"):
        load_profile(path)


def test_shipped_runner_profiles_still_load() -> None:
    root = Path(__file__).resolve().parents[2] / "runners"
    loaded = [load_profile(p) for p in sorted(root.glob("*.toml"))]
    assert loaded and all(p.platform in vocab.PLATFORMS for p in loaded)


# --- report.json read back -----------------------------------------------------------------


def _report(**case: object) -> RunReport:
    fields: dict[str, object] = {"id": "c", "kind": "loader", "platform": "cpu", "status": "passed"}
    fields.update(case)
    return RunReport(
        run_id="r",
        started_at="t0",
        finished_at="t1",
        argv=("harness", "run"),
        runner="cpu",
        env={"error": "no worker started; environment not collected"},
        cases=(CaseResult(**fields),),  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"[]", "not a report: expected a JSON object, got array"),
        (b"null", "not a report: expected a JSON object, got null"),
        (b"3", "not a report: expected a JSON object, got number"),
        (b"\x89PNG\r\n\x1a\n\x00\xff", "not a report: not UTF-8 text"),
    ],
    ids=["array", "null", "number", "binary"],
)
def test_read_report_rejects_what_is_not_a_report(
    tmp_path: Path, content: bytes, expected: str
) -> None:
    (tmp_path / "report.json").write_bytes(content)
    with pytest.raises(ReportFormatError, match=expected):
        read_report(tmp_path)


def test_read_report_rejects_an_unknown_status_and_unknown_fields(tmp_path: Path) -> None:
    write_run(_report(), tmp_path, latest=False)
    good = json.loads((tmp_path / "report.json").read_text())
    assert read_report(tmp_path).cases[0].status == "passed"
    doc = json.loads(json.dumps(good))
    doc["cases"][0]["status"] = "green"
    (tmp_path / "report.json").write_text(json.dumps(doc))
    with pytest.raises(ReportFormatError, match=r"report\.json: \$\.cases\[0\]\.status: 'green'"):
        read_report(tmp_path)
    doc = json.loads(json.dumps(good))
    doc["cases"][0]["owner"] = "someone"  # a field the renderers would silently drop
    (tmp_path / "report.json").write_text(json.dumps(doc))
    with pytest.raises(ReportFormatError, match=r"\$\.cases\[0\]\.owner: unknown key"):
        read_report(tmp_path)


# --- summary.md -----------------------------------------------------------------------------

NASTY = "a | b\nsecond | line\\|\r\n`tick``"


def _table_rows(markdown: str) -> list[list[str]]:
    tokens = MarkdownIt("commonmark").enable("table").parse(markdown)
    rows: list[list[str]] = []
    for i, tok in enumerate(tokens):
        if tok.type == "tr_open":
            rows.append([])
        elif tok.type == "inline" and tokens[i - 1].type in ("th_open", "td_open"):
            rows[-1].append(tok.content)
    return rows


def test_pipes_newlines_and_backticks_keep_the_summary_table_whole() -> None:
    check = CheckResult("q", "clip", None, ">=", 0.9, "fail", passed=None, reason="no\nmodel")
    report = _report(
        kind="load|er", platform="c\npu", status="failed", reason="\n" + NASTY, checks=(check,)
    )
    md = summary_markdown(report)
    rows = _table_rows(md)
    # the attention table (see tests/report/test_markdown.py): icon, case, status, check,
    # obtained, required, first error
    assert len(rows) == 2 and all(len(r) == 7 for r in rows), rows
    _, name, status, check_name, obtained, _, note = rows[1]
    assert "load|er" in name and "c pu" in name  # the whole name, on one line
    assert status == "failed" and check_name == "`q`" and obtained == "not run"
    assert note == "`no ...`"  # the check's reason, its first line, not a blank one
    reason_only = _report(status="failed", reason="\n" + NASTY)
    (row,) = _table_rows(summary_markdown(reason_only))[1:]
    assert row[-1].startswith("`a | b") and row[-1].endswith("...`")


def test_a_backtick_in_a_name_does_not_end_its_code_span() -> None:
    md = summary_markdown(_report(kind="lo`der"))
    html = MarkdownIt("commonmark").enable("table").render(md)
    assert "<code>lo`der/c[cpu]</code>" in html
