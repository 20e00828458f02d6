"""Checks of command-line values that every command shares, each failing as one line that
names the flag and what was expected (a :class:`UsageError`, exit 2), before any work starts.

Example::

    out = writable_folder("--out", args.out)     # created if missing; refused if unwritable
    roots = existing_folders("--code-root", args.code_roots)
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from harness.errors import UsageError

__all__ = ["existing_folders", "writable_folder"]


def writable_folder(flag: str, path: Path) -> Path:
    """``path`` as a folder this process can write in (or create). Refused when a component
    is a file, or the folder (or, when it does not exist yet, its nearest existing parent)
    cannot be written: a read-only mount, no permission. Nothing is left behind."""
    for folder in (path, *path.parents):
        if folder.exists() and not folder.is_dir():
            raise UsageError(f"{flag} {path}: {folder} exists and is not a folder")
    nearest = next((f for f in (path, *path.parents) if f.is_dir()), Path.cwd())
    try:
        # Root passes every os.access check, so try a real write (an immutable or read-only
        # folder refuses it for everyone); the file is removed when closed.
        with tempfile.NamedTemporaryFile(dir=nearest, prefix=".harness-write-check-"):
            pass
    except OSError as exc:
        why = exc.strerror or str(exc)
        where = "" if nearest == path else f" (in {nearest})"
        raise UsageError(
            f"{flag} {path}: cannot write there{where}: {why}; pick a folder this user can write"
        ) from None
    return path


def existing_folders(flag: str, paths: Iterable[str]) -> tuple[str, ...]:
    """Each of ``paths`` resolved, each an existing folder; the first that is not is refused."""
    out = []
    for raw in paths:
        p = Path(raw)
        if not p.is_dir():
            what = "is not a folder" if p.exists() else "does not exist"
            raise UsageError(f"{flag} {raw}: that folder {what} (cwd {os.getcwd()})")
        out.append(str(p.resolve()))
    return tuple(out)
