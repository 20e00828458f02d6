"""Import, in one process per group (two, beside each other), what the test processes import:
each module is compiled to bytecode once here, before the tests, instead of in each of the
test session's first processes at once (`.ci/run` installs without compiling; see the comment
there). Nothing is asserted: a module that does not import (an optional extra not installed)
is left to the tests to report."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

# torch and the stacks built on it (each of these imports torch)
TORCH = (
    "torch",
    "safetensors.torch",
    # the diffusers stack's cases and tests (the `diffusers` extra)
    "diffusers.models.transformers.transformer_wan",
    "diffusers.pipelines.wan",
    "diffusers.pipelines.ltx2",
    "diffusers.pipelines.ltx2.vocoder",
    "transformers.models.umt5",
    "transformers.models.gemma3",
    "transformers.models.clip",
)
# the rest, none of which imports torch
REST = (
    "numpy",
    "scipy.stats",
    "skimage.metrics",
    "av",
    "PIL.Image",
    "jinja2",
    "fastapi",
    "uvicorn",
    "httpx",
    "harness.cli",
    "harness.worker.main",
    "harness.worker.attempt",
    "harness.checks.quality",
    "harness.references.layered",
    "harness.pytest_plugin",
)
GROUPS = {"torch": TORCH, "rest": REST}


def cached(names: tuple[str, ...]) -> bool:
    """Whether the bytecode of each installed package's ``__init__`` is cached and not older
    than its source (found without importing anything): a cache a previous run filled, in which
    the rest of what that run imported is, too. The checkout's own packages (harness), whose
    bytecode is never kept, are compiled by the collection either way."""
    checkout = Path.cwd().resolve()
    for top in sorted({name.split(".")[0] for name in names}):
        spec = importlib.util.find_spec(top)
        if spec is None or not spec.origin or not spec.origin.endswith(".py"):
            continue  # not installed, or an extension module: nothing compiled
        if Path(spec.origin).resolve().is_relative_to(checkout):
            continue
        pyc = Path(importlib.util.cache_from_source(spec.origin))
        try:
            if pyc.stat().st_mtime < Path(spec.origin).stat().st_mtime:
                return False
        except OSError:
            return False
    return True


if __name__ == "__main__":
    # `warm_bytecode.py torch` or `rest`, one group in each of two processes; neither: both;
    # `cached`: exit 0 when both groups' bytecode is cached already, else 1.
    if sys.argv[1:] == ["cached"]:
        sys.exit(0 if cached((*TORCH, *REST)) else 1)
    names = GROUPS[sys.argv[1]] if len(sys.argv) > 1 else (*TORCH, *REST)
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as exc:  # reported by the tests that need it
            print(f"warm-up: {name} did not import: {exc!r}")
