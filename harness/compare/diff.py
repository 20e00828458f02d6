"""What head changed: ``git diff base..head`` read from git's own output (``-U0``, renames
detected), per file the lines head added or changed and the lines of base it removed or
changed. Renamed files carry both names; deleted files have only base lines; binary files
have none and are listed as non-Python changes.

Example::

    changes = changed_lines(Path("."), "main", "HEAD")
    changes.python_lines, [f.path for f in changes.other_files]
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.model.coverage import spell_lines

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


@dataclass(frozen=True)
class FileChange:
    """One file of the diff: ``path`` is head's name (base's when deleted)."""

    path: str
    status: str  # added, modified, deleted, renamed, binary
    old_path: str | None = None
    added: frozenset[int] = frozenset()  # head's line numbers added or changed
    removed: frozenset[int] = frozenset()  # base's line numbers removed or changed

    @property
    def python(self) -> bool:
        return self.status != "binary" and (
            self.path.endswith(".py") or (self.old_path or "").endswith(".py")
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "status": self.status,
            "old_path": self.old_path,
            "added": spell_lines(self.added),
            "removed": spell_lines(self.removed),
        }


@dataclass(frozen=True)
class ChangeSet:
    """``git diff base..head``: the files it changed, or why it could not be read."""

    base: str
    head: str
    files: tuple[FileChange, ...] = ()
    error: str | None = None
    repo: str | None = None

    @property
    def python_files(self) -> tuple[FileChange, ...]:
        return tuple(f for f in self.files if f.python)

    @property
    def other_files(self) -> tuple[FileChange, ...]:
        return tuple(f for f in self.files if not f.python)

    @property
    def python_lines(self) -> int:
        return sum(len(f.added) for f in self.python_files)

    @property
    def paths(self) -> frozenset[str]:
        """Every name a changed file had on either side."""
        return frozenset(p for f in self.files for p in (f.path, f.old_path) if p)

    def to_json(self) -> dict[str, Any]:
        return {
            "base": self.base,
            "head": self.head,
            "repo": self.repo,
            "error": self.error,
            "python_lines": self.python_lines,
            "files": [f.to_json() for f in self.files],
        }


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-C", str(repo), "-c", "core.quotepath=off", *args],
        capture_output=True,
        text=True,
        errors="replace",
        timeout=120,
        check=False,
    )


def resolve_commit(repo: Path, rev: str) -> tuple[str | None, str | None]:
    """``rev``'s commit in ``repo``, or None and why it does not resolve."""
    out = _git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    if out.returncode != 0 or not out.stdout.strip():
        why = out.stderr.strip().splitlines()[-1:] or ["unknown revision"]
        return None, f"revision '{rev}' does not resolve in {repo} ({why[0]})"
    return out.stdout.strip(), None


def _unquote(name: str) -> str:
    if name.startswith('"') and name.endswith('"'):
        return name[1:-1].encode().decode("unicode_escape").encode("latin-1").decode()
    return name


def _side_path(line: str, prefix: str) -> str | None:
    name = _unquote(line[4:].rstrip("\t").strip())
    if name == "/dev/null":
        return None
    return name[len(prefix) :] if name.startswith(prefix) else name


@dataclass
class _Block:
    old: str | None = None
    new: str | None = None
    status: str = "modified"
    binary: bool = False
    added: set[int] = field(default_factory=set)
    removed: set[int] = field(default_factory=set)

    def change(self) -> FileChange:
        path = self.new or self.old or "?"
        status = "binary" if self.binary else self.status
        old = self.old if self.old != path else None
        return FileChange(path, status, old, frozenset(self.added), frozenset(self.removed))


def parse_diff(text: str) -> tuple[FileChange, ...]:
    """The files of ``git diff -U0 -M`` output (prefixes ``a/`` and ``b/``)."""
    blocks: list[_Block] = []
    for line in text.splitlines():
        if line.startswith("diff --git "):
            blocks.append(_Block())
            head = line[len("diff --git ") :]
            names = re.findall(r'"(?:[^"\\]|\\.)*"|\S+', head)
            if len(names) == 2:  # a mode-only change or a pure rename has no ---/+++ lines
                old, new = (_unquote(n) for n in names)
                blocks[-1].old, blocks[-1].new = old.removeprefix("a/"), new.removeprefix("b/")
            else:  # unquoted names with spaces: split at " b/"
                m = re.fullmatch(r"a/(.*) b/(.*)", head)
                if m:
                    blocks[-1].old, blocks[-1].new = m.group(1), m.group(2)
            continue
        if not blocks:
            continue
        b = blocks[-1]
        if line.startswith("new file mode"):
            b.status = "added"
        elif line.startswith("deleted file mode"):
            b.status = "deleted"
        elif line.startswith("rename from "):
            b.old, b.status = _unquote(line[len("rename from ") :]), "renamed"
        elif line.startswith("rename to "):
            b.new = _unquote(line[len("rename to ") :])
        elif line.startswith("Binary files ") or line == "GIT binary patch":
            b.binary = True
        elif line.startswith("--- "):
            b.old = _side_path(line, "a/") if b.status != "added" else None
        elif line.startswith("+++ "):
            b.new = _side_path(line, "b/")
        elif line.startswith("@@"):
            m = _HUNK.match(line)
            if m:
                start, count = int(m.group(1)), int(m.group(2) or 1)
                b.removed.update(range(start, start + count))
                start, count = int(m.group(3)), int(m.group(4) or 1)
                b.added.update(range(start, start + count))
    for b in blocks:
        if b.status == "deleted":
            b.new = None
        elif b.status == "added":
            b.old = None
    return tuple(b.change() for b in blocks)


def changed_lines(repo: Path, base: str, head: str) -> ChangeSet:
    """``git diff base..head`` in ``repo``; a range that does not resolve is a ChangeSet with
    ``error`` saying which revision and why (the caller goes on without it)."""
    shas: dict[str, str] = {}
    for name, rev in (("base", base), ("head", head)):
        sha, why = resolve_commit(repo, rev)
        if sha is None:
            return ChangeSet(base, head, error=f"git diff {base}..{head}: {why}", repo=str(repo))
        shas[name] = sha
    out = _git(
        repo, "diff", "-U0", "-M", "--no-color", "--no-ext-diff", "--no-textconv",
        "--src-prefix=a/", "--dst-prefix=b/", shas["base"], shas["head"],
    )  # fmt: skip
    if out.returncode != 0:
        why = (out.stderr.strip().splitlines() or ["git diff failed"])[-1]
        return ChangeSet(base, head, error=f"git diff {base}..{head} in {repo}: {why}")
    return ChangeSet(shas["base"], shas["head"], parse_diff(out.stdout), repo=str(repo))


def changed_since(repo: Path, rev: str) -> ChangeSet:
    """What changed in ``repo``'s working tree since ``rev`` (committed or not; untracked
    files as added), as a ChangeSet whose ``head`` is ``"working tree"``."""
    sha, why = resolve_commit(repo, rev)
    if sha is None:
        return ChangeSet(rev, "working tree", error=f"--changed-since {rev}: {why}", repo=str(repo))
    out = _git(
        repo, "diff", "-U0", "-M", "--no-color", "--no-ext-diff", "--no-textconv",
        "--src-prefix=a/", "--dst-prefix=b/", sha,
    )  # fmt: skip
    if out.returncode != 0:
        why = (out.stderr.strip().splitlines() or ["git diff failed"])[-1]
        return ChangeSet(rev, "working tree", error=f"git diff {rev} in {repo}: {why}")
    files = list(parse_diff(out.stdout))
    new = _git(repo, "ls-files", "--others", "--exclude-standard", "-z")
    files += [FileChange(n, "added") for n in new.stdout.split("\0") if n]
    return ChangeSet(sha, "working tree", tuple(files), repo=str(repo))


def files_touched(files: Iterable[str], changes: ChangeSet) -> list[str]:
    """The files among ``files`` that ``changes`` changed (either side's name)."""
    paths = changes.paths
    return sorted(f for f in files if f in paths)


def where(lines_by_file: Mapping[str, Iterable[int]], limit: int = 4) -> str:
    """``tinyav/loader.py:88-90, x.py:3`` (at most ``limit`` files, then how many more)."""
    parts = [f"{p}:{spell_lines(v)}" for p, v in sorted(lines_by_file.items()) if v]
    more = f", +{len(parts) - limit} more" if len(parts) > limit else ""
    return ", ".join(parts[:limit]) + more


__all__ = [
    "ChangeSet",
    "FileChange",
    "changed_lines",
    "changed_since",
    "files_touched",
    "parse_diff",
    "resolve_commit",
    "where",
]
