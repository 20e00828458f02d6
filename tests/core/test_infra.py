"""Infrastructure or code: signatures, no blind retries, the run's finding and its exit code."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.execution.retry import Budget, with_retries
from harness.model import Attempt, CaseResult, ErrorInfo, RunReport, exit_code
from harness.model.infra import (
    SHAPES,
    Shape,
    classify,
    infra_only,
    infra_signature,
    infrastructure_findings,
    looks_like_infrastructure,
    normalize_url,
)
from harness.platforms.profile import RetryPolicy
from harness.report.html import render_run_html
from harness.report.markdown import summary_markdown
from harness.report.schema import validate_report

WHEEL = "https://files.example.org/npu/torch_npu-2.1.0-cp310-linux_aarch64.whl"


@pytest.mark.parametrize(
    ("etype", "message", "signature"),
    [
        # urllib.error.HTTPError: str() has no URL; the worker appends exc.url
        ("HTTPError", "HTTP Error 403: Forbidden", "HTTP 403"),
        (
            "HTTPError",
            f"HTTP Error 403: Forbidden ({WHEEL}?X-Amz-Signature=ab12)",
            f"HTTP 403 {WHEEL}",
        ),
        # pip, in a command case's output tail
        (
            "InfrastructureError",
            "command ['python', '-m', 'pip', 'install', 'torch_npu'] exited 1\n"
            "Looking in indexes: https://pypi.org/simple\n"
            f"ERROR: HTTP error 403 while getting {WHEEL}?Expires=1733112000&Signature=xY%2F\n"
            f"ERROR: Could not install requirement torch_npu from {WHEEL} because of HTTP "
            "error 403 Client Error: Forbidden for url",
            f"HTTP 403 {WHEEL}",
        ),
        # requests.HTTPError from raise_for_status()
        (
            "HTTPError",
            f"403 Client Error: Forbidden for url: {WHEEL}?token=s3cr3t",
            f"HTTP 403 {WHEEL}",
        ),
        # requests.ConnectionError, refused
        (
            "ConnectionError",
            "HTTPSConnectionPool(host='Mirror.Example.org', port=8443): Max retries exceeded with "
            "url: /simple/torch/?x=1 (Caused by NewConnectionError('<urllib3.connection."
            "HTTPSConnection object at 0x7f3a2c1d>: Failed to establish a new connection: "
            "[Errno 111] Connection refused'))",
            "connection-refused mirror.example.org:8443",
        ),
        # requests.ConnectionError, name resolution (urllib3 2.x)
        (
            "ConnectionError",
            "HTTPSConnectionPool(host='pypi.example.org', port=443): Max retries exceeded with "
            'url: /simple/torch/ (Caused by NameResolutionError("<urllib3.connection.'
            "HTTPSConnection object at 0x7f00>: Failed to resolve 'pypi.example.org' ([Errno -3] "
            'Temporary failure in name resolution)"))',
            "DNS name-not-resolved pypi.example.org",
        ),
        # urllib3 retries of a status: the URL comes from the pool and the path
        (
            "RetryError",
            "HTTPSConnectionPool(host='h.org', port=443): Max retries exceeded with url: "
            "/a/b.whl?sig=9 (Caused by ResponseError('too many 403 error responses'))",
            "HTTP 403 https://h.org/a/b.whl",
        ),
        # socket.gaierror names no host; URLError wraps it
        ("gaierror", "[Errno -3] Temporary failure in name resolution", "DNS name-not-resolved"),
        (
            "URLError",
            "<urlopen error [Errno -2] Name or service not known> (http://Cache.local:81/x)",
            "DNS name-not-resolved cache.local",
        ),
        ("ConnectionRefusedError", "[Errno 111] Connection refused", "connection-refused"),
        (
            "InfrastructureError",
            "command exited 7\n"
            "curl: (7) Failed to connect to 10.0.0.5 port 3128: Connection refused",
            "connection-refused 10.0.0.5:3128",
        ),
        ("RuntimeError", "CUDA error: invalid device ordinal (cuda:1)", "device missing cuda:1"),
        ("RuntimeError", "No CUDA GPUs are available", "device missing cuda"),
        ("RuntimeError", "HIP error: hipErrorNoDevice", "device missing hip"),
        (
            "RuntimeError",
            "NPU function error: aclrtGetDeviceCount(&device_count), error code is 207004\n"
            "[Error]: The device is unavailable.",
            "device missing npu",
        ),
        # curl and wget in a command's output
        (
            "InfrastructureError",
            "command exited 6\ncurl: (6) Could not resolve host: Mirror.Example.org",
            "DNS name-not-resolved mirror.example.org",
        ),
        (
            "InfrastructureError",
            f"--2026-12-02--  {WHEEL}\nERROR 403: Forbidden.",
            f"HTTP 403 {WHEEL}",
        ),
        # no known shape: type and first line, what varies blanked
        (
            "InfrastructureError",
            "worker 48211 lost at 2026-12-02T04:33:12.5Z in /tmp/tmpab12/w.sock\nmore",
            "InfrastructureError worker N lost at <time> in <path>",
        ),
    ],
)
def test_signature_of_real_looking_messages(etype: str, message: str, signature: str) -> None:
    assert infra_signature(etype, message) == signature


def test_same_failure_on_two_attempts_gives_one_signature() -> None:
    a = infra_signature("HTTPError", f"HTTP error 403 while getting {WHEEL}?Signature=aaa&Exp=1")
    b = infra_signature("HTTPError", f"HTTP error 403 while getting {WHEEL}?Signature=bbb&Exp=2")
    assert a == b == f"HTTP 403 {WHEEL}"


def test_normalize_url_drops_credentials_query_and_fragment() -> None:
    assert normalize_url("HTTPS://u:tok@H.org:8443/a/b.whl?X=1#sha256=00,") == (
        "https://h.org:8443/a/b.whl"
    )


_KIND_PREFIX = {
    "http": "HTTP ",
    "dns": "DNS name-not-resolved",
    "refused": "connection-refused",
    "reset": "connection-reset",
    "timeout": "network-timeout",
    "device": "device missing",
}


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s.kind}-{SHAPES.index(s)}")
def test_every_row_of_the_classifier_reads_its_own_example(shape: Shape) -> None:
    # the table is the classifier: each row's real message is infrastructure of its kind, and
    # no earlier row shadows it
    assert looks_like_infrastructure(shape.example)
    assert next(s for s in SHAPES if s.pattern.search(shape.example)) is shape
    signature = classify("", shape.example)
    assert signature is not None and signature.startswith(_KIND_PREFIX[shape.kind]), signature


def test_a_status_line_that_is_no_failure_does_not_hide_one() -> None:
    log = "GET /simple/x/ HTTP/1.1 200\ncurl: (6) Could not resolve host: h.org"
    assert looks_like_infrastructure(log)
    assert classify("", log) == "DNS name-not-resolved h.org"
    assert classify("", "HTTP/1.1 200 OK") is None


def test_code_failures_are_not_classified() -> None:
    for etype, message in (
        ("AssertionError", "psnr 28.1 < 30"),
        ("RuntimeError", "CUDA error: an illegal memory access was encountered"),
        ("ValueError", "shape (3, 4) vs (3, 5)"),
    ):
        assert classify(etype, message) is None and not looks_like_infrastructure(message)


def test_pip_lowercase_http_error_is_infrastructure() -> None:
    assert looks_like_infrastructure(f"ERROR: HTTP error 403 while getting {WHEEL}")
    assert not looks_like_infrastructure("ERROR: HTTP error 404 while getting x")
    assert not looks_like_infrastructure("AssertionError: 3 != 4")


# -- no blind retries ---------------------------------------------------------------------------


def _attempt(retry: int, message: str, etype: str = "HTTPError") -> Attempt:
    return Attempt("c", "cpu", retry, "error", 0, retry=retry, error=ErrorInfo.make(etype, message))


def _retries(messages: list[str], retries: int = 3, etype: str = "HTTPError") -> list[Attempt]:
    recorded: list[Attempt] = []
    feed: Iterator[str] = iter(messages)
    with_retries(
        lambda retry: _attempt(retry, next(feed), etype),
        policy=RetryPolicy(retries=retries),
        budget=Budget(None),
        case_attempts=recorded,
        all_attempts=recorded,
        record=recorded.append,
        stop=lambda: False,
    )
    return recorded


def test_same_infrastructure_failure_twice_is_not_retried_again() -> None:
    msg = f"HTTP error 403 while getting {WHEEL}?sig="
    tries = _retries([msg + "1", msg + "2", msg + "3", msg + "4"])
    assert len(tries) == 2, [a.error for a in tries]
    assert [a.infra for a in tries] == [f"HTTP 403 {WHEEL}"] * 2
    assert not tries[0].not_retried
    assert tries[1].not_retried == (
        f"not retried: same infrastructure failure twice (HTTP 403 on {WHEEL})"
    )


def test_different_infrastructure_failures_are_retried() -> None:
    tries = _retries(
        [f"HTTP error 503 while getting {WHEEL}", "Read timed out", f"HTTP Error 403: x ({WHEEL})"],
        retries=2,
    )
    assert len(tries) == 3 and not any(a.not_retried for a in tries)


def test_code_failure_carries_no_signature() -> None:
    (only,) = _retries(["bad shape 3 vs 4"], etype="ValueError")
    assert only.status == "error" and not only.infra


# -- the run's finding and its exit code ------------------------------------------------------


def _case(case_id: str, attempts: list[Attempt], status: str = "error") -> CaseResult:
    fixed = [
        Attempt(case_id, "cpu", i, a.status, 0, retry=a.retry, error=a.error, infra=a.infra)
        for i, a in enumerate(attempts)
    ]
    return CaseResult(case_id, "pipeline", "cpu", status, attempts=tuple(fixed))  # type: ignore[arg-type]


def _infra_tries(n: int) -> list[Attempt]:
    msg = f"HTTP error 403 while getting {WHEEL}"
    return [
        Attempt(
            "c",
            "cpu",
            i,
            "error",
            0,
            retry=i,
            error=ErrorInfo.make("X", msg),
            infra=f"HTTP 403 {WHEEL}",
        )
        for i in range(n)
    ]


def _report(*cases: CaseResult) -> RunReport:
    return RunReport(
        "r",
        "2026-12-02T04:00:00+00:00",
        "2026-12-02T04:00:05+00:00",
        (),
        "cpu",
        {"error": "not collected"},
        cases,
    )


def test_infrastructure_only_run_exits_3_with_the_line_first(tmp_path: Path) -> None:
    report = _report(
        _case("a", _infra_tries(2)), _case("b", _infra_tries(2)), _case("c", _infra_tries(1))
    )
    (finding,) = report.infrastructure
    assert finding.line() == (
        f"infrastructure: HTTP 403 on {WHEEL} (3 cases, 5 attempts); not a code failure"
    )
    assert exit_code(report) == 3
    first = summary_markdown(report).splitlines()[0]
    assert first.startswith("### 🛑 infrastructure: HTTP 403 on `" + WHEEL + "`")
    assert first.endswith("(3 cases, 5 attempts); not a code failure")
    doc = json.loads(json.dumps(report.to_json()))
    validate_report(doc)
    assert doc["infrastructure"][0]["cases"] == [
        "pipeline/a[cpu]",
        "pipeline/b[cpu]",
        "pipeline/c[cpu]",
    ]
    assert RunReport.from_json(doc).infrastructure == report.infrastructure
    html = render_run_html(report, tmp_path)
    assert 'class="banner infra"' in html and finding.line() in html
    from harness.report.github import run_annotations

    first_error = run_annotations(report)[0]
    assert (first_error.level, first_error.title) == ("error", "infrastructure")
    assert first_error.message == finding.line()


def test_code_failure_beside_infrastructure_keeps_exit_1_and_the_line() -> None:
    code = _case("code", [_attempt(0, "bad shape 3 vs 4", "ValueError")])
    report = _report(_case("a", _infra_tries(2)), _case("b", _infra_tries(2)), code)
    assert infra_only(report.cases[0], report.infrastructure)
    assert not infra_only(code, report.infrastructure)
    assert exit_code(report) == 1
    assert summary_markdown(report).splitlines()[0].startswith("### 🛑 infrastructure: HTTP 403")


def test_one_infrastructure_attempt_alone_is_no_finding() -> None:
    report = _report(_case("a", _infra_tries(1)))
    assert report.infrastructure == () and exit_code(report) == 1
    assert "infrastructure" not in report.to_json()
    assert not summary_markdown(report).startswith("### 🛑 infrastructure")


def test_every_attempt_of_one_case_is_a_finding() -> None:
    (finding,) = infrastructure_findings([_case("a", _infra_tries(2))])
    assert (finding.cases, finding.attempts) == (("pipeline/a[cpu]",), 2)


def test_flaky_cases_on_infrastructure_do_not_make_the_run_3() -> None:
    ok = Attempt("x", "cpu", 1, "passed", 0, retry=1)
    report = _report(
        _case("a", [*_infra_tries(1), ok], "flaky"), _case("b", [*_infra_tries(1), ok], "flaky")
    )
    assert len(report.infrastructure) == 1
    assert exit_code(report) == 7


# -- harness compare: both sides stopped by the same infrastructure failure ---------------------


def test_both_sides_failing_on_one_infrastructure_signature_is_infrastructure() -> None:
    from harness.compare.failures import failure_matrix
    from harness.compare.judge import judge_case

    base, head = _case("a", _infra_tries(2)), _case("a", _infra_tries(2))
    matrix = failure_matrix(base, head)
    assert matrix.verdict == "infrastructure", matrix
    assert matrix.reason == (
        f"infrastructure on both sides: HTTP 403 on {WHEEL}; not a code failure"
    )
    judged = judge_case(base, head, case=None, latency=[], base_root=Path("."), head_root=Path("."))
    assert judged.verdict == "infrastructure"
    from harness.model import Comparison, SideInfo

    side = SideInfo(None, "r", "d")
    assert Comparison("c", side, side, True, (judged,)).exit_code() == 3  # did not compare
    # a code failure on one side is the code's: judged as before, never infrastructure
    code = _case("a", [_attempt(0, "bad shape 3 vs 4", "ValueError")])
    assert failure_matrix(code, head).verdict == "new_failure"
    assert failure_matrix(base, code).verdict == "new_failure"
