"""A scratch git repository for the diff-aware triage and ``harness explain`` end-to-end tests:
a loader module one case executes, a timing guard another case trips on every side (its
failure is pre-existing, never head's), and a folder outside the repository that a third case
imports through a symlinked code root. Two planted heads: ``elsewhere`` changes the loader
(equivalently: the loader case still passes) plus non-Python files, renames one module,
deletes another and changes a binary file; ``breaks`` breaks the line of the loader that the
loader case runs. Every target is pure Python and takes microseconds, so a comparison costs a
few seconds of worker start-up."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from gitrepo import git

LOADER = """\
def load(n):
    total = 0
    for i in range(n):
        total += i
    return total


def unused_by_the_cases(n):
    return n * 2
"""

LOADER_ELSEWHERE = LOADER.replace("    return n * 2\n", "    doubled = n + n\n    return doubled\n")
LOADER_BROKEN = LOADER.replace("        total += i\n", "        total += i + 1\n")

TIMING = """\
def guard(elapsed_ms, limit_ms=10.0):
    if elapsed_ms > limit_ms:
        raise AssertionError(f"timing guard: step took {elapsed_ms:.1f} ms > {limit_ms:g} ms")
"""

SCENARIOS = """\
from harness import probe

import loader


def load_case(n=2000):
    with probe.stage("load"):
        total = loader.load(n)
    probe.note("total", total)
"""

TIMING_SCENARIO = """\
from harness import probe

import timing


def timing_case():
    with probe.stage("step"):
        timing.guard(12.0)
"""

EXTERNAL = """\
from harness import probe


def ext_case():
    with probe.stage("ext"):
        probe.note("ok", 1)
"""

CASES = """\
[[case]]
id = "load"
kind = "loader"
target = "scenarios:load_case"
timeout_s = 60
[[case.checks]]
metric = "note.total"
op = "=="
threshold = 1999000

[[case]]
id = "timing"
kind = "pipeline"
target = "timing_scenario:timing_case"
timeout_s = 60
retries = 0

[[case]]
id = "ext"
kind = "quant"
target = "extmod:ext_case"
code_root = "ext"
timeout_s = 60
"""

RUNNER = 'name = "cpu"\nplatform = "cpu"\npreimport = []\n[retry]\nretries = 0\n'


def make_repo(root: Path) -> dict[str, Path]:
    """The repository (tag ``base``, branches ``elsewhere`` and ``breaks``), the folder outside
    it that ``ext`` links to, the runner profile and a runs folder."""
    outside = root / "outside"
    outside.mkdir(parents=True)
    (outside / "extmod.py").write_text(EXTERNAL)
    repo = root / "repo"
    files = {
        "mini/loader.py": LOADER,
        "mini/timing.py": TIMING,
        "mini/scenarios.py": SCENARIOS,
        "mini/timing_scenario.py": TIMING_SCENARIO,
        "mini/extra.py": "VALUE = 1\n\n\n# a module head renames\n",
        "mini/gone.py": "GONE = True\n",
        "cases/triage.toml": CASES,
        "assets/logo.bin": "",
    }
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    (repo / "assets" / "logo.bin").write_bytes(b"\x00\x01\x02")
    (repo / "ext").symlink_to(outside)  # a code root whose files lie outside the repository
    git(repo.parent, "init", "-q", str(repo))
    git(repo, "config", "user.email", "t@example.com")
    git(repo, "config", "user.name", "t")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    git(repo, "tag", "base")
    git(repo, "checkout", "-q", "-b", "elsewhere", "base")
    (repo / "mini" / "loader.py").write_text(LOADER_ELSEWHERE)
    (repo / "docs").mkdir()
    (repo / "docs" / "notes.md").write_text("the loader's helper doubles by addition\n")
    (repo / "assets" / "logo.bin").write_bytes(b"\x00\x09\x02")
    git(repo, "mv", "mini/extra.py", "mini/extra_renamed.py")
    git(repo, "rm", "-q", "mini/gone.py")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "elsewhere: the loader's helper, notes, a rename, a deletion")
    git(repo, "checkout", "-q", "-b", "breaks", "base")
    (repo / "mini" / "loader.py").write_text(LOADER_BROKEN)
    git(repo, "commit", "-qam", "breaks: the loop the loader case runs")
    git(repo, "checkout", "-q", "base")
    runner = root / "runner.toml"
    runner.write_text(RUNNER)
    return {"repo": repo, "root": root, "runner": runner, "runs": root / "runs"}


def harness(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def compare(
    env: dict[str, Path], head: str, *extra: str
) -> tuple[int, dict[str, Any] | None, str, Path]:
    """``harness compare --base base --head HEAD`` of the repository's cases: the exit code,
    comparison.json, the output and the comparison folder (2 rounds, one run each, reused
    workers: these comparisons are about failures and coverage, not latency). The case whose
    code root lies outside the repository is left out (a comparison calls it not_comparable:
    both sides import one file)."""
    out = env["runs"]
    proc = harness(
        "compare", "cases", "--cases-from", "head", "--base", "base", "--head", head,
        "--repo", str(env["repo"]), "--code-root", "mini", "--runner", str(env["runner"]),
        "--noise-dir", str(out / "noise"), "--references", str(out / "no-references"),
        "--out", str(out), "--id", head, "--rounds", "2", "--runs-per-round", "1",
        "--reuse-workers", "-k", "not ext", *extra,
        cwd=env["root"],
    )  # fmt: skip
    path = out / head / "comparison.json"
    doc = json.loads(path.read_text()) if path.is_file() else None
    return proc.returncode, doc, proc.stdout + proc.stderr, out / head
