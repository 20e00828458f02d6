"""Line coverage of one attempt (a coverage attempt, outside the timed rounds): coverage.py
restricted to the side's code roots and the packages the case or runner profile names.

:func:`measure` yields a dict that, once the block ends, maps each measured file (absolute,
as coverage.py canonicalizes it) to its executed line numbers; ``{"error": ...}`` when
coverage.py is missing or fails, so the attempt itself still runs and is recorded.

A coverage attempt runs in the warm worker that ran the case (a cold first run under a trace
function cost 1.9x a cold plain run of the default case; a warm one 1.09x), so the lines its
modules ran when they were imported were run before the tracer started. They are added from
the source (:func:`statement_lines`): every module-level statement of each measured file
(and, in classes, the class body) with its whole span, and each executed statement's span
too, so a diff line in the middle of a multi-line statement matches the statement coverage.py
reports by its first line. On Python 3.12+ coverage.py's ``sys.monitoring`` core is used; on
3.11 its C tracer.
"""

from __future__ import annotations

import ast
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

_QUIET = ["no-data-collected", "module-not-imported", "module-not-measured", "no-ctracer"]


def split_sources(sources: Sequence[str]) -> tuple[list[str], list[str]]:
    """Folders (absolute paths) and package names, as coverage.py's ``source`` and
    ``source_pkgs`` take them."""
    dirs = [s for s in sources if os.path.isabs(s)]
    return dirs, [s for s in sources if not os.path.isabs(s)]


@contextmanager
def measure(sources: Sequence[str]) -> Iterator[dict[str, Any]]:
    """Measure the block's executed lines in ``sources`` (folders and package names)."""
    out: dict[str, Any] = {}
    try:
        import coverage
    except ImportError as exc:
        out["error"] = f"coverage.py is not installed in {sys.executable} ({exc})"
        yield out
        return
    dirs, pkgs = split_sources(sources)
    cov = coverage.Coverage(
        data_file=None,
        source=dirs or None,
        source_pkgs=pkgs or None,
        branch=False,
        config_file=False,
    )
    cov.set_option("run:disable_warnings", _QUIET)
    if sys.version_info >= (3, 12):
        cov.set_option("run:core", "sysmon")
    try:
        cov.start()
    except Exception as exc:  # reported with the attempt, never fatal
        out["error"] = f"coverage.py could not start: {type(exc).__name__}: {exc}"
        yield out
        return
    try:
        yield out
    finally:
        cov.stop()
        data = cov.get_data()
        # coverage.py also lists the source files nothing imported, with no lines: left out
        out["files"] = {
            f: sorted(statement_lines(f, lines))
            for f in data.measured_files()
            if (lines := data.lines(f))
        }


# path -> (mtime_ns, first line -> span, module-level lines): parsed once per worker
_PARSED: dict[str, tuple[int, dict[int, range], frozenset[int]]] = {}


def _header(node: ast.stmt) -> range:
    """A statement's lines: the whole of a simple one, the header of a compound one (up to
    its body), decorators included."""
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])
    body = getattr(node, "body", None)
    if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
        return range(first, max(node.lineno, body[0].lineno - 1) + 1)
    return range(first, (node.end_lineno or node.lineno) + 1)


def _parse(path: str) -> tuple[dict[int, range], frozenset[int]]:
    mtime = os.stat(path).st_mtime_ns
    found = _PARSED.get(path)
    if found is not None and found[0] == mtime:
        return found[1], found[2]
    with open(path, "rb") as f:
        tree = ast.parse(f.read(), filename=path)
    spans: dict[int, range] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt):
            spans[node.lineno] = _header(node)
    imported: set[int] = set()

    def top(body: Iterable[ast.stmt]) -> None:
        for node in body:
            imported.update(_header(node))
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue  # its body runs when it is called, not at import
            for field in ("body", "orelse", "finalbody"):
                inner = getattr(node, field, None)
                if isinstance(inner, list):
                    top(s for s in inner if isinstance(s, ast.stmt))
            for handler in getattr(node, "handlers", ()):
                imported.update(_header(handler))
                top(handler.body)

    top(tree.body)
    _PARSED[path] = (mtime, spans, frozenset(imported))
    return spans, frozenset(imported)


def statement_lines(path: str, lines: Iterable[int]) -> set[int]:
    """``lines`` (what coverage.py recorded) with the whole span of each executed statement
    and the module-level statements that ran when the module was imported; just ``lines``
    where the file cannot be read or parsed."""
    out = set(lines)
    try:
        spans, imported = _parse(path)
    except (OSError, SyntaxError, ValueError):
        return out
    for n in list(out):
        out.update(spans.get(n, ()))
    return out | imported
