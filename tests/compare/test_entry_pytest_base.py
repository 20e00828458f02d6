"""`pytest harness/ --harness-base REV` as an entry point, on a tiny scratch repository: under
pytest-xdist the comparison runs once, in one worker, the other waiting for its result; and an
incomplete comparison (infrastructure errors) fails the session with exit 3 whatever its items
said."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from minirepo import commit, git, make_mini

import harness

pytestmark = pytest.mark.slow

PKG = str(Path(harness.__file__).resolve().parent)

# a second case of another kind, so that the two xdist workers each get a batch
QUANT_CASE = """\
id = "mini-quant"
kind = "quant"
target = "minitarget:work"
params = { n = 10 }
timeout_s = 60
"""

# A bug planted in the harness inside head's workers (sitecustomize runs at interpreter start):
# every head attempt is a harness internal error, an infrastructure error of the comparison.
BROKEN_HARNESS = (
    "import harness.worker.attempt as attempt\n"
    "def broken(*args, **kwargs):\n"
    "    raise KeyError('planted harness bug')\n"
    "attempt.evaluate_attempt_checks = broken\n"
)


def pytest_base(repo: Path, out: Path, head: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", PKG, f"--rootdir={repo}", "-p", "no:cacheprovider",
         "--harness-base", "base", "--harness-head", head, "--harness-code-root", "mini",
         "--harness-out", str(out), "--harness-references", str(out / "no-references"),
         "--harness-reuse-workers", "-rA", *extra],  # the entry point, not latency
        cwd=repo, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip


def test_under_xdist_the_comparison_runs_once_and_every_worker_reads_it(tmp_path: Path) -> None:
    pytest.importorskip("xdist")
    repo = make_mini(tmp_path)
    commit(repo, "a second case", {"cases/quant.toml": QUANT_CASE})
    git(repo, "tag", "-f", "base")
    commit(repo, "notes", {"NOTES": "x\n"})
    out = tmp_path / "runs"
    proc = pytest_base(repo, out, "HEAD", "-n", "2")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "2 passed" in proc.stdout, proc.stdout[-3000:]
    made = sorted(out.glob("*/comparison.json"))
    assert len(made) == 1, made  # once, not once per worker
    assert len(list(out.glob("*/head/report.json"))) == 1


def test_an_incomplete_comparison_fails_the_session_with_exit_3(tmp_path: Path) -> None:
    repo = make_mini(tmp_path)
    commit(repo, "a harness bug in head's workers", {"mini/sitecustomize.py": BROKEN_HARNESS})
    out = tmp_path / "runs"
    proc = pytest_base(repo, out, "HEAD")
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "harness comparison INCOMPLETE (exit 3)" in proc.stdout, proc.stdout[-3000:]
    assert "planted harness bug" in proc.stdout
    # the faults are head's alone (base's attempts passed), and a harness bug is never the
    # case's failure: the case is missing, settled at the first look
    assert "head: loader/mini[cpu] attempt" in proc.stdout, proc.stdout[-3000:]
    assert "base: loader/mini[cpu] attempt" not in proc.stdout, proc.stdout[-3000:]
    assert "missing" in proc.stdout and "the harness failed on every run" in proc.stdout
    assert "new_failure" not in proc.stdout, proc.stdout[-3000:]
    assert " r3 " not in proc.stdout, proc.stdout[-3000:]
    # the explain page follows the comparison's summary: the missing case, not head's code
    page = proc.stdout[proc.stdout.index("## harness explain: comparison") :]
    assert "### 1. `loader/mini[cpu]`: missing" in page, page[:2000]
