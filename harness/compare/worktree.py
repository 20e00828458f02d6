"""Checking revisions of the code under test out as detached git worktrees, and cleaning up.

:class:`Checkouts` is a context manager: every worktree it added is removed (``git worktree
remove --force`` then ``prune``) when the block ends, also on an error or Ctrl-C.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType

from harness.errors import InfrastructureError, UsageError


def git(repo: Path, *args: str) -> str:
    """``git -C repo args``; stdout, or an error naming the command and git's message."""
    proc = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise UsageError(
            f"git {' '.join(args)} in {repo} failed: {proc.stderr.strip() or proc.stdout.strip()}"
        )
    return proc.stdout.strip()


def resolve(repo: Path, rev: str) -> str:
    """The full commit id ``rev`` names in ``repo`` (a usage error naming it otherwise)."""
    try:
        return git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    except UsageError:
        raise UsageError(f"revision {rev!r}: not a commit in {repo}") from None


def repo_root(path: Path) -> Path:
    try:
        return Path(git(path, "rev-parse", "--show-toplevel"))
    except UsageError:
        raise UsageError(f"--repo {path}: not inside a git repository") from None


class Checkouts:
    """Detached worktrees of one repository under a temporary folder."""

    def __init__(self, repo: Path) -> None:
        self.repo = repo_root(repo)
        self.root = Path(tempfile.mkdtemp(prefix="harness-compare-"))
        self.added: list[Path] = []

    def add(self, rev: str, name: str) -> Path:
        """Check ``rev`` out (detached) as ``<tmp>/<name>``; returns its path."""
        sha = resolve(self.repo, rev)
        path = self.root / name
        try:
            git(self.repo, "worktree", "add", "--detach", "--force", str(path), sha)
        except UsageError as exc:
            raise InfrastructureError(f"cannot check {rev} out: {exc}") from None
        self.added.append(path)
        return path

    def close(self) -> None:
        for path in self.added:
            subprocess.run(
                ["git", "-C", str(self.repo), "worktree", "remove", "--force", str(path)],
                capture_output=True,
                check=False,
            )
        self.added.clear()
        subprocess.run(
            ["git", "-C", str(self.repo), "worktree", "prune"], capture_output=True, check=False
        )
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Checkouts:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
