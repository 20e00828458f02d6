"""Which files an attempt's code under test came from (DESIGN.md "Code provenance").

The worker notes the file its target was imported from as ``harness.target_file``; every other
process that runs code under test for the attempt notes its own under a prefixed key: a
multi-rank case's other ranks ``rank<R>.harness.target_file``, a server's ranks (from the file
that called ``harness.probe.request``, in its perf log) ``server.harness.target_file`` (rank 0)
and ``server.rank<R>.harness.target_file``. :func:`code_files` reads them all back, so a
comparison checks the server and every rank, not only the worker.

Example::

    code_files({"harness.target_file": "/wt/base/pkg/scene.py",
                "rank1.harness.target_file": "/wt/base/pkg/scene.py"})
    # {"harness.target_file": "/wt/base/pkg/scene.py", "rank1.harness.target_file": ...}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

TARGET_FILE = "harness.target_file"
# The environment variable naming a comparison side's checkout in its workers: a server case
# starts its server there, so each side serves its own checkout's code.
CHECKOUT_ENV = "HARNESS_CHECKOUT"

__all__ = ["CHECKOUT_ENV", "TARGET_FILE", "code_files"]


def code_files(notes: Mapping[str, Any]) -> dict[str, str]:
    """The notes that name a file code under test came from (key -> file), the worker's first,
    then the other processes' by key; ``"None"`` (a target with no file) is left out."""
    found = {
        k: v
        for k, v in notes.items()
        if (k == TARGET_FILE or k.endswith("." + TARGET_FILE)) and isinstance(v, str)
    }
    ordered = sorted(found, key=lambda k: (k != TARGET_FILE, k))
    return {k: found[k] for k in ordered if found[k] != "None"}
