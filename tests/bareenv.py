"""The environment of a fresh interpreter that a test starts with nothing of its own process's
but the variables it names (and ``PATH``).

One thing of this process's is kept: the folder of the bytecode cache (``PYTHONPYCACHEPREFIX``),
where this one has one. Where compiled modules are kept is this runner's concern, not an input
of the test: CI keeps them in such a folder between runs (.ci/run), and an interpreter started
without it compiled torch's, diffusers' and transformers' modules from source again (~12 s of
CPU in the one that builds the diffusers pipelines, measured 2026-12-05, docs/benchmarks.md).
"""

from __future__ import annotations

import os

PREFIX = "PYTHONPYCACHEPREFIX"


def bare_env(**names: str) -> dict[str, str]:
    """``names`` and ``PATH=/usr/bin:/bin``, plus this process's bytecode cache folder."""
    env = {"PATH": "/usr/bin:/bin", **names}
    if os.environ.get(PREFIX):
        env.setdefault(PREFIX, os.environ[PREFIX])
    return env
