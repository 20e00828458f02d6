"""The seeds' red CI that was not the code: every job's *Install dependencies* step answered
HTTP 403 for one wheel URL, on every attempt. Here: a local server that answers 403 to every
GET, three command cases that download a wheel from it as an install step would (each with a
fresh signed query string), ``harness run`` as a user runs it."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from corecases import write_cases

from harness.report.schema import validate_report

pytestmark = pytest.mark.slow
HARNESS = (sys.executable, "-m", "harness.cli")

FETCH = """\
import os, sys, urllib.error, urllib.request

url = sys.argv[1] + f"?X-Amz-Signature={os.getpid()}"  # signed URLs differ every time
try:
    urllib.request.urlopen(url, timeout=10).read()
except urllib.error.HTTPError as e:
    print(f"ERROR: HTTP error {e.code} while getting {e.url}", file=sys.stderr)  # as pip says it
    sys.exit(1)
"""


class Forbidden(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(403)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def forbidden() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Forbidden)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_download_answering_403_every_time_is_infrastructure(
    project: Path, forbidden: str
) -> None:
    (project / "code" / "fetch.py").write_text(FETCH)
    wheel = f"{forbidden}/simple/tinydep/tinydep-1.0-py3-none-any.whl"
    write_cases(
        project,
        "install.toml",
        "".join(
            f'[[case]]\nid = "install-{n}"\nkind = "import"\n'
            f'command = ["{sys.executable}", "code/fetch.py", "{wheel}"]\n\n'
            for n in "abc"
        ),
    )
    proc = subprocess.run(
        [*HARNESS, "run", "cases", "--code-root", "code", "--run-id", "r1", "--retries", "3", "-q"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    line = f"infrastructure: HTTP 403 on {wheel} (3 cases, 6 attempts); not a code failure"
    assert proc.returncode == 3, proc.stderr
    announce, first, *_ = proc.stderr.splitlines()
    assert announce.startswith("run r1:") and first == line, proc.stderr
    run = project / "reports" / "r1"
    summary = (run / "summary.md").read_text()
    assert summary.splitlines()[0] == (
        f"### 🛑 infrastructure: HTTP 403 on `{wheel}` (3 cases, 6 attempts); not a code failure"
    )
    doc = json.loads((run / "report.json").read_text())
    validate_report(doc)
    assert doc["infrastructure"] == [
        {
            "signature": f"HTTP 403 {wheel}",
            "text": line,
            "cases": [f"import/install-{n}[cpu]" for n in "abc"],
            "attempts": 6,
        }
    ]
    for case in doc["cases"]:
        # --retries 3 allowed four tries: each case stopped after the second identical failure
        assert [a["status"] for a in case["attempts"]] == ["error", "error"], case["attempts"]
        assert [a["retry"] for a in case["attempts"]] == [0, 1]
        assert case["attempts"][0]["error"]["type"] == "InfrastructureError"
        stopped = f"not retried: same infrastructure failure twice (HTTP 403 on {wheel})"
        assert case["attempts"][1]["not_retried"] == stopped
        assert stopped in case["reason"]
    assert "banner infra" in (run / "index.html").read_text()
