"""The seeds' red CI that was not the code: every NPU job's *Install dependencies* step answered
HTTP 403 for one wheel URL, on every attempt. Here: a local package index on 127.0.0.1 whose
simple page answers (with a freshly signed wheel link each time, as a CDN's would) and whose
wheel answers 403; two command cases run the real ``pip download`` against it as an install
step does, beside a case that fails on its code; ``harness run`` and ``harness compare`` as a
user runs them."""

from __future__ import annotations

import http.server
import itertools
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from corecases import write_cases

from harness.report.schema import validate_comparison, validate_report

pytestmark = pytest.mark.slow
HARNESS = (sys.executable, "-m", "harness.cli")
WHEEL_PATH = "/packages/tinydep-1.0-py3-none-any.whl"


class Index(http.server.BaseHTTPRequestHandler):
    """``/simple/tinydep/`` links the wheel (signed anew on every request); the wheel is 403."""

    signatures = itertools.count()

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/simple/tinydep":
            href = f"{WHEEL_PATH}?X-Amz-Signature={next(self.signatures)}#sha256={'0' * 64}"
            body = f'<html><body><a href="{href}">tinydep-1.0-py3-none-any.whl</a>'.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
        else:
            body = b"Forbidden"
            self.send_response(403)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def index() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Index)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def harness(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*HARNESS, *args],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_a_dependency_download_answering_403_every_time_is_infrastructure(
    project: Path, index: str
) -> None:
    # --isolated: the machine's pip configuration (extra indexes, find-links) stays out of it
    pip = [sys.executable, "-m", "pip", "download", "--isolated", "--no-deps", "--no-cache-dir"]
    pip += ["--disable-pip-version-check", "--index-url", f"{index}/simple", "-d", "dl"]
    install = json.dumps([*pip, "tinydep==1.0"])
    code_fail = json.dumps([sys.executable, "-c", "raise SystemExit('psnr 28.1 < 30.0')"])
    write_cases(
        project,
        "npu.toml",
        "".join(
            f'[[case]]\nid = "install-{n}"\nkind = "import"\ncommand = {install}\n\n' for n in "ab"
        )
        + f'[[case]]\nid = "denoise-check"\nkind = "import"\ncommand = {code_fail}\n',
    )
    wheel = f"{index}{WHEEL_PATH}"
    line = f"infrastructure: HTTP 403 on {wheel} (2 cases, 4 attempts); not a code failure"

    # -- the run: a code failure beside the infrastructure keeps exit 1, the line still first
    run = harness(project, "run", "cases", "--run-id", "r1", "--retries", "3", "-q")
    assert run.returncode == 1, run.stderr
    announce, first, *_ = run.stderr.splitlines()
    assert announce.startswith("run r1:") and first == line, run.stderr
    folder = project / "reports" / "r1"
    assert (folder / "summary.md").read_text().splitlines()[0] == (
        f"### 🛑 infrastructure: HTTP 403 on `{wheel}` (2 cases, 4 attempts); not a code failure"
    )
    doc = json.loads((folder / "report.json").read_text())
    validate_report(doc)
    assert doc["infrastructure"] == [
        {
            "signature": f"HTTP 403 {wheel}",
            "text": line,
            "cases": ["import/install-a[cpu]", "import/install-b[cpu]"],
            "attempts": 4,
        }
    ]
    cases = {c["id"]: c for c in doc["cases"]}
    stopped = f"not retried: same infrastructure failure twice (HTTP 403 on {wheel})"
    for n in "ab":
        attempts = cases[f"install-{n}"]["attempts"]
        # --retries 3 allowed four tries: the case stopped after the second identical failure
        assert [(a["status"], a["retry"]) for a in attempts] == [("error", 0), ("error", 1)]
        assert attempts[0]["error"]["type"] == "InfrastructureError"
        assert "HTTP error 403 while getting" in attempts[0]["error"]["message"]  # pip's words
        assert "X-Amz-Signature=" in attempts[0]["error"]["message"]  # the token, stripped below
        assert {a["infra"] for a in attempts} == {f"HTTP 403 {wheel}"}
        assert attempts[1]["not_retried"] == stopped
    code = cases["denoise-check"]
    assert code["status"] == "failed" and len(code["attempts"]) == 1  # never retried
    assert "infra" not in code["attempts"][0]
    assert "banner infra" in (folder / "index.html").read_text()

    # -- the install step alone, no retries: the run's only failures are infrastructure, exit 3
    again = harness(project, "run", "cases", "-k", "install", "--run-id", "r2", "--retries", "0")
    assert again.returncode == 3, again.stderr
    assert f"infrastructure: HTTP 403 on {wheel} (2 cases, 2 attempts); not a code failure" in (
        again.stderr.splitlines()
    )

    # -- both sides of a comparison hit it: infrastructure, never "pre-existing" or "no change"
    cmp = harness(project, "compare", "reports/r1", "reports/r2", "--id", "c1")
    comparison = json.loads((project / "reports" / "c1" / "comparison.json").read_text())
    validate_comparison(comparison)
    verdicts = {c["id"]: (c["verdict"], c["reason"]) for c in comparison["cases"]}
    both = f"infrastructure on both sides: HTTP 403 on {wheel}; not a code failure"
    assert verdicts["install-a"] == verdicts["install-b"] == ("infrastructure", both)
    assert verdicts["denoise-check"][0] == "missing"  # r2 did not run it
    assert cmp.returncode == 3, cmp.stderr  # neither compared: never 0, never 1
    assert f"infrastructure       import/install-a[cpu]: {both}" in cmp.stderr
    summary = (project / "reports" / "c1" / "summary.md").read_text()
    first, second = summary.splitlines()[:2]
    assert first == (
        f"### 🛑 infrastructure: HTTP 403 on `{wheel}` (2 cases, both sides); not a code failure"
    )
    assert second.startswith("### 🛑 2 infrastructure, 1 missing: ")
