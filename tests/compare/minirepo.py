"""A tiny scratch git repository for entry-point tests (bisect, merge, ``pytest --harness-base``):
a one-function target that takes milliseconds, one case file, and a base commit. Tests add the
commits they need with :func:`commit`; a comparison of two of them takes a few seconds (worker
start-up), not the minutes a tinyav comparison takes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from gitrepo import commit, git

TARGET = """\
from harness import probe


def work(n=2000):
    with probe.stage("work"):
        total = sum(range(n))
    probe.note("total", total)
"""

CASE = """\
id = "mini"
kind = "loader"
target = "minitarget:work"
timeout_s = 60
[[checks]]
metric = "note.total"
op = "=="
threshold = 1999000
"""

# The target uses no torch: its workers do not import it before their first case.
RUNNER = 'name = "cpu"\nplatform = "cpu"\npreimport = []\n'


def make_mini(root: Path) -> Path:
    """The repository (``mini/minitarget.py``, ``cases/mini.toml``), tagged ``base``."""
    repo = root / "mini-repo"
    repo.mkdir(parents=True)
    git(repo, "init", "-q")
    git(repo, "config", "user.email", "t@example.com")
    git(repo, "config", "user.name", "t")
    files = {"mini/minitarget.py": TARGET, "cases/mini.toml": CASE, "runners/cpu.toml": RUNNER}
    commit(repo, "base", files)
    git(repo, "tag", "base")
    return repo


def harness_cli(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``python -m harness.cli ARGS`` in ``cwd``."""
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
