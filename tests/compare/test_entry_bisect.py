"""`harness bisect` as an entry point, on a tiny scratch repository (a one-function target):
a step that decides nothing is never good, Ctrl-C aborts with exit 3 keeping the steps so far,
and every bisect writes a folder of its own."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from minirepo import TARGET, commit, harness_cli, make_mini

from harness.compare.bisect import step_status
from harness.model import CaseComparison
from harness.model.comparison import Divergence, FailureMatrix

# Fails every other call in a worker: with base never failing, head is intermittent.
INTERMITTENT = TARGET.replace(
    "def work(n=2000):\n",
    "CALLS = [0]\n\n\ndef work(n=2000):\n"
    "    CALLS[0] += 1\n"
    "    if CALLS[0] % 2 == 0:\n"
    '        raise RuntimeError("intermittent head")\n',
)


def bisect_args(repo: Path, out: Path, bad: str) -> list[str]:
    return [
        "bisect", "mini", "--good", "base", "--bad", bad, "--repo", str(repo),
        "--code-root", "mini", "--rounds", "3", "--runs-per-round", "1", "--out", str(out),
        "--references", str(out / "no-references"), "--noise-dir", str(out / "noise"),
    ]  # fmt: skip


def verdict(name: str, exit_code: int = 0) -> tuple[str, str | None]:
    c = CaseComparison(
        id="c",
        kind="loader",
        platform="cpu",
        verdict=name,
        latency_verdict="no_change",
        quality_verdict="no_change",
        failures=FailureMatrix("no_change"),
        divergence=Divergence("none", None, {}),
        reason="why",
    )
    return step_status(c, exit_code)


@pytest.mark.parametrize("name", ["flaky", "suspect", "missing", "not_comparable"])
def test_a_step_that_decides_nothing_is_skipped_never_good(name: str) -> None:
    status, why = verdict(name)
    assert status == "skip" and why is not None and name in why


@pytest.mark.parametrize("code", [2, 3, 5])
def test_an_incomplete_step_comparison_is_skipped_whatever_its_verdict(code: int) -> None:
    assert verdict("no_change", code)[0] == "skip"


def test_good_and_bad_steps() -> None:
    assert verdict("no_change")[0] == "good"
    assert verdict("improvement")[0] == "good"
    assert verdict("regression")[0] == "bad"
    assert verdict("new_failure", 1)[0] == "bad"


@pytest.mark.slow
def test_bisect_never_calls_an_intermittent_head_good_aborts_on_ctrl_c_and_keeps_each_folder(
    tmp_path: Path,
) -> None:
    repo = make_mini(tmp_path)
    sha = commit(repo, "fail every other call", {"mini/minitarget.py": INTERMITTENT})
    out = tmp_path / "runs"
    first = harness_cli(*bisect_args(repo, out, "HEAD"), cwd=repo)
    assert first.returncode in (0, 1), first.stderr[-3000:]
    (folder,) = out.glob("bisect-*")
    doc = json.loads((folder / "bisect.json").read_text())
    (step,) = doc["steps"]
    assert step["sha"] == sha
    # flaky today (skip); new_failure once head-only failures block (bad): never good
    assert step["status"] != "good", step
    assert "no bad commit" not in first.stdout

    # the same bisect again, interrupted in its first step: exit 3, the step cut short is a
    # skip, and the first bisect's folder is left as it was
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.cli", *bisect_args(repo, out, "HEAD")],
        cwd=repo,
        stderr=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:  # interrupt once the first step's comparison has started
        seen.append(line)
        if line.lstrip().startswith("compare "):
            break
    proc.send_signal(signal.SIGINT)
    rest = proc.stderr.read()
    assert proc.wait(timeout=300) == 3, "".join(seen) + rest
    assert "bisect interrupted" in rest and "Traceback" not in rest, rest
    (second,) = set(out.glob("bisect-*")) - {folder}
    doc2 = json.loads((second / "bisect.json").read_text())
    assert doc2["interrupted"] is True and doc2["first_bad"] is None
    assert [s["status"] for s in doc2["steps"]] == ["skip"]
    assert json.loads((folder / "bisect.json").read_text()) == doc
