"""A scratch git repository of a toy target for the comparison end-to-end corpus of planted
heads whose subject is which attempts count (issue 18): each head breaks the code in a way
that the final attempts alone do not show (a hang a retry hides, a crash in a warm-up, a
failure in one run of seven, a module gone so the case is skipped, a case file head broke).

The toy target does almost nothing (a few microseconds of work in one stage), so a whole
comparison takes seconds; what it does wrong on each head is driven by a counter file in the
``state`` folder a case names, so "the first try of every run" is the odd calls.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]

BASE_WORK = '''"""The toy target: one stage of trivial work."""

from harness import probe


def work(state: str = "", mode: str = "", **_: object) -> None:
    with probe.stage("work"):
        x = sum(range(1000))
    probe.note("x", x)
'''

# A helper shared by the heads: how many times this case's target has been called so far
# (across workers: a timed-out worker is replaced, the file stays).
COUNTER = """
import os
from pathlib import Path


def calls(state: str) -> int:
    path = Path(state) / "calls"
    n = int(path.read_text()) + 1 if path.is_file() else 1
    path.write_text(str(n))
    return n
"""

# The planted head: what each case's ``mode`` makes it do wrong (base ignores ``mode``):
# ``hang`` hangs on every first try (odd calls: the warm-up's try 0, round 0's try 0, ...)
# and its retry passes; ``warmcrash`` kills its worker in the warm-up (the first call) and
# passes every measured run; ``intermittent`` fails the third call (the warm-up of the second
# round's fresh pair of workers).
PLANTED = (
    COUNTER
    + """
import time

from harness import probe


def work(state: str = "", mode: str = "", **_: object) -> None:
    n = calls(state) if mode else 0
    if mode == "hang" and n % 2 == 1:
        time.sleep(30)
    if mode == "warmcrash" and n == 1:
        os._exit(7)
    with probe.stage("work"):
        x = sum(range(1000))
    if mode == "intermittent" and n == 3:
        raise ValueError("decode raced the writer")
    probe.note("x", x)
"""
)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def case_toml(case_id: str, state: Path, mode: str = "", **extra: Any) -> str:
    """One case of the toy; only a case that hangs gets a short timeout, 3 s (the others
    30 s): a fresh worker's first attempt imports the target, which took up to 1.4 s on a
    runner at load 10, and a timed-out try that did not hang would shift which calls hang."""
    lines = [
        "[[case]]",
        f'id = "{case_id}"',
        'kind = "pipeline"',
        'target = "toy.work:work"',
        f"params = {{ state = {json.dumps(str(state))}, mode = {json.dumps(mode)} }}",
        "seed = 1",
        f"timeout_s = {3 if mode == 'hang' else 30}",
        "retries = 1",
    ]
    lines += [f"{k} = {json.dumps(v)}" for k, v in extra.items()]
    return "\n".join(lines) + "\n"


def make_toy(root: Path) -> dict[str, Path]:
    """The repository (``base``; ``planted``, which also drops the module ``toyextra`` that a
    case may require; ``broken-case`` with a case file that no longer loads) and a runs
    folder."""
    repo = root / "repo"
    pkg = repo / "src" / "toy"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "work.py").write_text(BASE_WORK)
    (repo / "src" / "toyextra.py").write_text("VALUE = 1\n")
    (repo / "cases").mkdir()
    (repo / "cases" / "toy.toml").write_text(case_toml("toy", root / "state-repo"))
    git(repo.parent, "init", "-q", str(repo))
    git(repo, "config", "user.email", "t@example.com")
    git(repo, "config", "user.name", "t")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    git(repo, "tag", "base")
    git(repo, "checkout", "-q", "-b", "planted", "base")
    (pkg / "work.py").write_text(PLANTED)
    git(repo, "rm", "-q", "src/toyextra.py")
    git(repo, "commit", "-qam", "planted: hang, warm-up crash, intermittent failure, no toyextra")
    git(repo, "checkout", "-q", "-b", "broken-case", "base")
    (repo / "cases" / "toy.toml").write_text('id = "toy"\nkind = "pipeline"\ntarget = 7\n')
    git(repo, "commit", "-qam", "break the case file")
    git(repo, "checkout", "-q", "base")
    # the cpu runner's retry settings, without its tinyav budgets; the toy uses no torch, so
    # its workers do not import it before their first case
    runner = root / "toy-runner.toml"
    runner.write_text(
        'name = "cpu"\nplatform = "cpu"\nthreads = 1\npreimport = []\n'
        '[retry]\nretries = 1\nretry_on = ["infra", "oom", "timeout"]\n'
    )
    return {"repo": repo, "runs": root / "runs", "root": root, "runner": runner}


def compare(
    toy: dict[str, Path],
    head: str,
    case_file: Path | None,
    *extra: str,
    run_id: str = "",
    runs_per_round: int | None = 1,
) -> tuple[int, dict[str, Any] | None, str]:
    """``harness compare --base base --head HEAD --rounds 3`` over ``case_file`` (or the
    repository's own cases with ``--cases-from head`` when None); the exit code,
    comparison.json (None if none was written) and the output. One run per round unless
    ``runs_per_round`` says otherwise (None: the command's default): these comparisons count
    failures, and one run keeps them short."""
    out = toy["runs"]
    if runs_per_round is not None:
        extra = ("--runs-per-round", str(runs_per_round), *extra)
    cases = [str(case_file)] if case_file is not None else ["cases", "--cases-from", "head"]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.cli",
            "compare",
            *cases,
            "--base",
            "base",
            "--head",
            head,
            "--repo",
            str(toy["repo"]),
            "--code-root",
            "src",
            "--runner",
            str(toy["runner"]),
            "--noise-dir",
            str(out / "noise"),
            "--references",
            str(out / "no-references"),
            "--out",
            str(out),
            "--id",
            run_id or head,
            "--rounds",
            "3",
            *extra,
        ],
        cwd=toy["root"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ},
    )
    path = out / (run_id or head) / "comparison.json"
    doc = json.loads(path.read_text()) if path.is_file() else None
    return proc.returncode, doc, proc.stdout + proc.stderr
