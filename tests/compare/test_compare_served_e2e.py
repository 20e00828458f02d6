"""A server case through ``harness compare`` on a toy repository whose head changes the server's
code: each side must start its own server from its own checkout (the file that served each
request is recorded and checked by code provenance), and the change must be seen. Its two cases
share the named server "toy": each side starts it once and both cases use it. Before the
fix both sides' servers ran the working tree's code (``python -m`` from the worker's working
folder) and the comparison saw no change.

The toy server is the standard library's ``http.server`` (no FastAPI: start-up is what this test
pays per attempt); it wraps each request in ``harness.probe.request``, as tinyav.serve does,
which is how the harness learns which file served it. A multi-rank case's ranks are checked the
same way (their ``-P`` start is tested in tests/multirank).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from scratchrepo import git

pytestmark = pytest.mark.slow

SERVER = '''\
"""A toy server: GET /health 200, POST answers {"value": VALUE}."""

import http.server
import json
import sys

from harness import probe

VALUE = "1"


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.answer({"status": "ok"})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with probe.request(body["request_id"]):
            with probe.stage("serve"):
                probe.note("value", VALUE)
        self.answer({"value": VALUE})

    def answer(self, doc: dict) -> None:
        data = json.dumps(doc).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
'''

RANKS = '''\
"""A toy two-rank target: every rank records its value."""

import numpy as np

from harness import probe

VALUE = 1


def work() -> None:
    with probe.stage("work"):
        probe.fingerprint("value", np.array([VALUE], dtype=np.float32))
'''

CASE = """\
[[case]]
id = "{id}"
kind = "server"
warmup = 0
timeout_s = 60

[case.server]
name = "toy"
command = ["{{python}}", "-m", "toysrv.serve", "{{port}}"]
ready_url = "/health"
ready_timeout_s = 20
stop_timeout_s = 2

[[case.requests]]
path = "/gen"
json = {{ prompt = "x" }}
outputs.value = {{ field = "value", decode = "text", suffix = ".txt" }}

"""
# two cases share the server "toy": each side starts its own, once, from its own checkout
CASES = CASE.format(id="toy-serve") + CASE.format(id="toy-serve-again")


def make_repo(root: Path) -> Path:
    """``toysrv`` at base; branch ``head`` changes the value both the server gives."""
    repo = root / "repo"
    (repo / "toysrv").mkdir(parents=True)
    (repo / "cases").mkdir()
    (repo / "toysrv" / "__init__.py").write_text("")
    (repo / "toysrv" / "serve.py").write_text(SERVER)
    (repo / "toysrv" / "tp.py").write_text(RANKS)
    (repo / "cases" / "toy.toml").write_text(CASES)
    git(repo.parent, "init", "-q", str(repo))
    git(repo, "config", "user.email", "t@example.com")
    git(repo, "config", "user.name", "t")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    git(repo, "tag", "base")
    git(repo, "checkout", "-q", "-b", "head", "base")
    (repo / "toysrv" / "serve.py").write_text(SERVER.replace('VALUE = "1"', 'VALUE = "2"'))
    (repo / "toysrv" / "tp.py").write_text(RANKS.replace("VALUE = 1", "VALUE = 2"))
    git(repo, "commit", "-qam", "head: value 2")
    git(repo, "checkout", "-q", "base")
    return repo


def test_each_side_serves_its_own_checkout_and_head_s_change_is_seen(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    runs = tmp_path / "runs"
    runner = tmp_path / "toy-runner.toml"  # the toy uses no torch: workers do not import it
    runner.write_text('name = "cpu"\nplatform = "cpu"\nthreads = 1\npreimport = []\n')
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.cli",
            "compare",
            "--base",
            "base",
            "--head",
            "head",
            "--code-root",
            ".",
            "--rounds",
            "2",
            "--reuse-workers",  # provenance and outputs, not latency, are the subject
            "--no-confirm",
            "--runner",
            str(runner),
            "--noise-dir",
            str(runs / "noise"),
            "--references",
            str(runs / "no-refs"),
            "--out",
            str(runs),
            "--id",
            "c",
            "-q",
        ],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    path = runs / "c" / "comparison.json"
    assert path.is_file(), proc.stderr[-4000:]
    doc = json.loads(path.read_text())
    case = {c["id"]: c for c in doc["cases"]}["toy-serve"]
    served = {}
    for side in ("base", "head"):
        report = json.loads((runs / "c" / side / "report.json").read_text())
        attempts = [a for c in report["cases"] for a in c["attempts"]]
        served[side] = {a["notes"].get("server.harness.target_file") for a in attempts}
        # the module its command runs (resolved without the perf log) is the same file
        run = {a["notes"].get("server.command.harness.target_file") for a in attempts}
        assert run == served[side], (side, run, served[side])
    tree = repo.resolve()
    # each side's server imported its own checkout's toysrv/serve.py (not the working tree's,
    # which is at base and would be first on the path of `python -m` run from it)
    for side in ("base", "head"):
        (file,) = served[side]
        assert file is not None, f"{side}'s server recorded no code file"
        assert file.endswith("/toysrv/serve.py"), file
        assert not file.startswith(str(tree)), f"{side} served the working tree's code: {file}"
        assert doc[side]["code_files"]["toy-serve"] == file
    assert served["base"] != served["head"], served
    for side in ("base", "head"):  # one start-up per side, on the first attempt that needed it
        report = json.loads((runs / "c" / side / "report.json").read_text())
        attempts = [a for c in report["cases"] for a in c["attempts"]]
        assert len(attempts) >= 4 and {a["notes"]["server.shared"] for a in attempts} == {"toy"}
        assert sum("server.startup" in a["stages"] for a in attempts) == 1, side
    # and head's change is seen: the answer differs, so the case diverges at its output
    assert case["verdict"] != "not_comparable", case
    assert case["divergence"]["first"] == "output:value", case["divergence"]
