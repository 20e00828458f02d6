"""The report templates compiled once, kept where Python keeps the bytecode of a module at the
same path: each `harness run`, `report` and `compare` renders a page, and compiling its
templates took ~20-30 ms of CPU in every one of them (a `harness run` of a few cases takes
~170 ms in all). Jinja compiles a template to Python code; this cache keeps that code as Python
keeps a module's: beside the template in ``__pycache__`` (or under ``PYTHONPYCACHEPREFIX``),
written with ``marshal``, not at all where ``PYTHONDONTWRITEBYTECODE`` is set, and read only
when the template's text and Jinja's version are the ones it was compiled from. A folder that
cannot be written (an installation read-only to this user) leaves each process compiling, as
before."""

from __future__ import annotations

import contextlib
import importlib.util
import marshal
import sys
from hashlib import sha256
from pathlib import Path
from typing import TYPE_CHECKING

import jinja2
from jinja2.bccache import Bucket

from harness.fsio import write_atomic

if TYPE_CHECKING:
    from jinja2 import Environment

# Beside the interpreter's tag that cache_from_source puts in the name (marshal's format is the
# interpreter's): the code Jinja generates depends on its version, the text on the template's.
_MAGIC = b"harness-template\n"


def _header(source_checksum: str) -> bytes:
    return _MAGIC + f"{jinja2.__version__}\n{source_checksum}\n".encode()


class CompiledTemplates(jinja2.BytecodeCache):
    """A :class:`jinja2.BytecodeCache` that stores each template's code at the path
    ``importlib.util.cache_from_source`` gives its file (``run.j2`` ->
    ``__pycache__/run.cpython-311.opt-template.pyc``); templates without a file are compiled
    each time."""

    def __init__(self) -> None:
        self._paths: dict[str, Path] = {}

    def get_bucket(
        self, environment: Environment, name: str, filename: str | None, source: str
    ) -> Bucket:
        key = self.get_cache_key(name, filename)
        if filename is not None and key not in self._paths:
            # (NotImplementedError: an interpreter without a cache tag)
            with contextlib.suppress(NotImplementedError, ValueError):
                self._paths[key] = Path(
                    importlib.util.cache_from_source(filename, optimization="template")
                )
        bucket = Bucket(environment, key, self.get_source_checksum(source))
        self.load_bytecode(bucket)
        return bucket

    def get_source_checksum(self, source: str) -> str:
        return sha256(source.encode("utf-8")).hexdigest()

    def load_bytecode(self, bucket: Bucket) -> None:
        path = self._paths.get(bucket.key)
        if path is None:
            return
        try:
            data = path.read_bytes()
        except OSError:
            return
        header = _header(bucket.checksum)
        if not data.startswith(header):  # another template text or Jinja, or not ours
            return
        try:
            bucket.code = marshal.loads(data[len(header) :])
        except (EOFError, ValueError, TypeError):
            bucket.reset()

    def dump_bytecode(self, bucket: Bucket) -> None:
        path = self._paths.get(bucket.key)
        if path is None or bucket.code is None or sys.dont_write_bytecode:
            return
        data = _header(bucket.checksum) + marshal.dumps(bucket.code)

        def write(tmp: Path) -> None:
            tmp.write_bytes(data)

        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, write)
        except OSError:  # a folder this user cannot write: compiled again next time
            pass
