"""``harness explain`` of a run, in process: the order (code before infrastructure, a case that
left its layered reference before one that did not), the fields other parts of the harness add
read as recorded (``reference_layers``, an infrastructure signature), and "no layered
reference" / "not recorded" where they are absent; the HTML page offline and escaped."""

from __future__ import annotations

from typing import Any

from harness.model import Attempt, CaseResult, ErrorInfo, RunReport
from harness.report.explain import explain_run
from harness.report.explain_render import explain_html, explain_markdown

URL = "https://files.example.org/simple/pkg/pkg-1.0-py3-none-any.whl"


def _case(cid: str, *attempts: Attempt, status: str = "error") -> CaseResult:
    return CaseResult(cid, "pipeline", "cpu", status, attempts=attempts)  # type: ignore[arg-type]


def _infra(cid: str, i: int) -> Attempt:
    err = ErrorInfo.make("CommandFailed", f"HTTP error 403 while getting {URL}")
    return Attempt(cid, "cpu", i, "error", 0, error=err, infra=f"HTTP 403 {URL}")


def _failed(cid: str) -> Attempt:
    err = ErrorInfo.make("CheckFailed", "checks failed: ssim: 0.80 (want >= 0.95)")
    return Attempt(cid, "cpu", 0, "failed", 0, error=err)


def test_a_run_orders_code_first_infrastructure_last_and_reads_layers_as_recorded() -> None:
    report = RunReport(
        "r1", "", "", (), "cpu", {},
        (
            _case("install-a", _infra("install-a", 0), _infra("install-a", 1)),
            _case("install-b", _infra("install-b", 0), _infra("install-b", 1)),
            _case("plain", _failed("plain"), status="failed"),
            _case("drifted", _failed("drifted"), status="failed"),
            _case("green", Attempt("green", "cpu", 0, "passed", 0), status="passed"),
        ),
    )  # fmt: skip
    raw: dict[str, Any] = report.to_json()
    layers = {
        "status": "departed",
        "first_departure": "denoise.step01",
        "summary": "inputs identical (3 hashes); denoise.step01 rel L2 3e-3 > 1e-3: "
        "first departure",
        "layers": [],
    }
    raw["cases"][3]["attempts"][0]["reference_layers"] = layers
    x = explain_run(report, raw, "reports/r1")
    names = [e.name for e in x.cases]
    # a departure from the reference first; the code failure without one next; infrastructure
    assert names == [
        "pipeline/drifted[cpu]", "pipeline/plain[cpu]",
        "pipeline/install-a[cpu]", "pipeline/install-b[cpu]",
    ], names  # fmt: skip
    drifted, plain, infra = x.cases[0], x.cases[1], x.cases[2]
    assert drifted.departure == layers["summary"]
    assert plain.departure == "no layered reference"
    assert plain.cause == "code: CheckFailed: checks failed: ssim: 0.80 (want >= 0.95)"
    assert infra.cause.startswith(f"infrastructure: HTTP 403 on {URL}")
    assert infra.likelihood == "infrastructure, not head's code"
    assert plain.environment.startswith("not recorded")
    assert plain.change.startswith("not recorded (run with --coverage")
    assert x.others == 1 and x.notes and "not a code failure" in x.notes[0]
    md = explain_markdown(x)
    assert md.index("`pipeline/drifted[cpu]`") < md.index("`pipeline/install-a[cpu]`")
    html = explain_html(x)
    assert "Content-Security-Policy" in html and "<link" not in html and 'src="http' not in html
    assert "&gt; 1e-3" in html  # escaped


def test_a_layered_field_that_says_there_is_none_reads_no_layered_reference() -> None:
    report = RunReport("r2", "", "", (), "cpu", {}, (_case("c", _failed("c"), status="failed"),))
    raw: dict[str, Any] = report.to_json()
    raw["cases"][0]["attempts"][0]["reference_layers"] = {
        "status": "no_layered_reference", "first_departure": None, "summary": "", "layers": [],
    }  # fmt: skip
    (e,) = explain_run(report, raw, "reports/r2").cases
    assert e.departure == "no layered reference"
