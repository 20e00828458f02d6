"""A scratch git repository whose history has a planted change, run with the real
``harness run`` at each commit: the real run folders the end-to-end history test ingests.

The target is one case of one sleeping stage (no torch: its worker imports nothing first);
commit ``slow`` makes that stage 15x slower and changes the input it records (the hint
``history check`` gives), a docs-only commit on each side changes nothing. Five runs: base,
docs, slow, slow, docs-after (about 3 s of CPU each, mostly the worker's start).
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from gitrepo import commit, git

REPO = Path(__file__).resolve().parents[2]

TARGET = """\
import time

from harness import probe


def work(n=2000):
    probe.record_input("prompt", "a cat on a bike")
    with probe.stage("work"):
        time.sleep(0.004)
    probe.note("total", sum(range(n)))
"""

CASE = """\
id = "mini"
kind = "loader"
target = "minitarget:work"
timeout_s = 60
repeats = 3
[[checks]]
metric = "note.total"
op = "=="
threshold = 1999000
"""

RUNNER = """\
name = "cpu"
platform = "cpu"
preimport = []

# an overrun warns: the slow commit's runs stay green (what a budget sized by hand and then
# outgrown looks like); baselines propose would raise it, and says so
[policy.latency]
on_fail = "warn"

[budgets.mini]  # sized by hand
work = 0.02
"""


def harness_run(repo: Path, out: Path, run_id: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.cli",
            "run",
            "--out",
            str(out),
            "--run-id",
            run_id,
            "--code-root",
            "mini",
            "-q",
        ],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        # No bytecode in the scratch tree: one working tree moves from commit to commit, and
        # `slow` rewrites minitarget.py at its old size; within the second of the last compile
        # (the runs are quick with a shared zygote), Python would take the stale .pyc as
        # current and run the fast code again (CI, 2026-12-05: no regression found). A
        # comparison or bisection checks each revision out in a fresh worktree instead.
        env={**os.environ, "PYTHONPATH": str(REPO), "PYTHONDONTWRITEBYTECODE": "1"},
    )


@dataclass(frozen=True)
class History:
    repo: Path
    runs: Path
    commits: dict[str, str]  # run id -> commit


def make_history(root: Path) -> History:
    repo = root / "repo"
    repo.mkdir(parents=True)
    git(repo, "init", "-q")
    git(repo, "config", "user.email", "t@example.com")
    git(repo, "config", "user.name", "t")
    files = {"mini/minitarget.py": TARGET, "cases/mini.toml": CASE, "runners/cpu.toml": RUNNER}
    plan = [
        ("base", files),
        ("docs", {"README.md": "docs only\n"}),
        (
            "slow",
            {
                "mini/minitarget.py": TARGET.replace("0.004", "0.06").replace(
                    "a cat on a bike", "a cat on a horse"
                )
            },
        ),
        (None, {}),
        ("docs-after", {"README.md": "docs only, again\n"}),
    ]
    runs = root / "runs"
    commits: dict[str, str] = {}
    sha = ""
    for i, (message, change) in enumerate(plan):
        if message is not None:
            sha = commit(repo, message, change)
        run_id = f"h{i + 1}"
        proc = harness_run(repo, runs, run_id)
        assert proc.returncode == 0, proc.stderr[-2000:]
        commits[run_id] = sha
    return History(repo, runs, commits)
