"""Reference files verified once per process: SHA-256 and decoded content, keyed by the file's
resolved path, size and modification time (ns), plus its change time and inode.

A worker runs many attempts that compare with the same references. Re-hashing and re-decoding
every PNG per attempt was most of the checks' time; a file's bytes cannot change without its
size or ``mtime_ns`` changing under any ordinary write (editing, copying, ``git checkout``), so
a file whose ``(path, size, mtime_ns)`` is unchanged since it was verified is the file that was
verified. A changed file has a new key and is hashed (and decoded) again before use.

The memo holds at most ``max_bytes`` of decoded arrays (least recently used dropped first);
decoded arrays are made read-only, so no check can change what a later attempt compares with.
"""

from __future__ import annotations

import dataclasses
import os
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from harness.references.manifest import file_sha256

__all__ = ["VERIFIED", "FileKey", "VerifiedFiles", "file_key", "stat_key"]

FileKey = tuple[str, int, int, int, int]


def file_key(resolved: Path) -> FileKey:
    """``(path, size, mtime_ns, ctime_ns, inode)`` of an already resolved path (``OSError`` if
    it is gone). ctime and inode are in it too: a file replaced by rename (as the harness
    writes) gets a new inode even within one tick of the file system's clock."""
    return stat_key(resolved, os.stat(resolved))


def stat_key(resolved: Path | str, st: os.stat_result) -> FileKey:
    """:func:`file_key` from a ``stat`` of ``resolved`` already made."""
    return (str(resolved), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


def _unchanged(key: FileKey) -> bool:
    try:
        return file_key(Path(key[0])) == key
    except OSError:
        return False


def _freeze(value: Any) -> int:
    """Make the arrays of ``value`` (an array or a dataclass of arrays) read-only; their bytes."""
    if isinstance(value, np.ndarray):
        value.setflags(write=False)
        return int(value.nbytes)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return sum(_freeze(getattr(value, f.name)) for f in dataclasses.fields(value))
    return 0


@dataclass
class _Item:
    sha256: str
    decoded: dict[str, Any] = field(default_factory=dict)
    nbytes: int = 0


class VerifiedFiles:
    """What is known of verified files in this process (see the module docstring)."""

    def __init__(self, max_bytes: int = 512 << 20) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[FileKey, _Item] = OrderedDict()
        self._nbytes = 0
        self.hashed = 0  # files hashed so far (a changed file counts again)

    def clear(self) -> None:
        self._items.clear()
        self._nbytes = 0

    def sha256(self, path: Path | str, key: FileKey) -> str:
        """The SHA-256 of ``path`` as it is under ``key``, hashed only if ``key`` is new."""
        item = self._items.get(key)
        if item is None:
            digest = file_sha256(Path(path))
            self.hashed += 1
            # Cached only if the file did not change while it was read.
            if _unchanged(key):
                self._items[key] = _Item(digest)
            return digest
        self._items.move_to_end(key)
        return item.sha256

    def decoded(
        self, path: Path | str, key: FileKey, kind: str, decode: Callable[[Path], Any]
    ) -> Any:
        """``decode(path)`` for a file already verified under ``key``, decoded once per kind."""
        item = self._items.get(key)
        if item is not None and kind in item.decoded:
            self._items.move_to_end(key)
            return item.decoded[kind]
        value = decode(Path(path))
        nbytes = _freeze(value)
        if item is not None and _unchanged(key) and nbytes <= self.max_bytes:
            item.decoded[kind] = value
            item.nbytes += nbytes
            self._nbytes += nbytes
            self._evict()
        return value

    def _evict(self) -> None:
        while self._nbytes > self.max_bytes and self._items:
            _key, old = self._items.popitem(last=False)
            self._nbytes -= old.nbytes


VERIFIED = VerifiedFiles()
