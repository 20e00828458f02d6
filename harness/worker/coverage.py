"""Line coverage of one attempt (a coverage attempt, outside the timed rounds): coverage.py
restricted to the side's code roots and the packages the case or runner profile names.

:func:`measure` yields a dict that, once the block ends, maps each measured file (absolute,
as coverage.py canonicalizes it) to its executed line numbers; ``{"error": ...}`` when
coverage.py is missing or fails, so the attempt itself still runs and is recorded.

On Python 3.12+ coverage.py's ``sys.monitoring`` core is used (its overhead is a fraction of
the trace function's); on 3.11 its C tracer.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Sequence
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
        out["files"] = {f: sorted(data.lines(f) or ()) for f in data.measured_files()}
