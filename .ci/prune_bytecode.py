"""Keep, of the bytecode cache that `.ci/run` keeps between runs (``PYTHONPYCACHEPREFIX``), only
what mirrors the folders named after it: the environment's and the interpreter's standard
library, whose paths are the same every run. The rest mirrors the checkout and the tests'
temporary folders (toy repositories, scratch copies, pytester projects), new paths each run,
which would otherwise pile up there run after run.

Usage: prune_bytecode.py PREFIX KEEP [KEEP ...] (absolute paths, as Python sees the sources)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


def prune(folder: Path, keep: list[Path]) -> None:
    for child in folder.iterdir():
        if any(child == k or child.is_relative_to(k) for k in keep):
            continue
        if child.is_dir() and not child.is_symlink() and any(k.is_relative_to(child) for k in keep):
            prune(child, keep)
        elif child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)


def main(argv: list[str]) -> int:
    prefix = Path(argv[0])
    if not prefix.is_dir():
        return 0
    # the prefix mirrors each source's absolute path without its root (importlib's
    # cache_from_source)
    keep = [prefix / Path(k).relative_to(Path(k).anchor) for k in argv[1:]]
    prune(prefix, keep)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
