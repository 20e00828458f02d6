"""Fixtures for the core tests (helpers live in corecases.py)."""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from corecases import project

from harness import probe

__all__ = ["project", "rec"]


@pytest.fixture
def rec(tmp_path: Path) -> Iterator[Any]:
    """An active recording, as inside an attempt, with an output folder."""
    recorder = probe._begin(seed=1, platform="cpu", output_dir=tmp_path / "out")
    try:
        yield recorder
    finally:
        probe._end()
