"""Git for the tests' scratch repositories (:mod:`minirepo`, :mod:`triagerepo`,
:mod:`scratch`): one command, and one commit of files written as text."""

from __future__ import annotations

import subprocess
from pathlib import Path


def git(repo: Path, *args: str) -> str:
    """``git -C repo ARGS``: its stdout, stripped; a failure raises with git's output."""
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def commit(repo: Path, message: str, files: dict[str, str]) -> str:
    """Write ``files`` (path relative to the repository -> text) and commit them; the sha."""
    for rel, text in files.items():
        path = repo / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", message)
    return git(repo, "rev-parse", "HEAD")
