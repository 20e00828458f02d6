"""Put the bundled target (and the repo root, for ``harness.probe``) on sys.path."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
TARGET = ROOT / "targets" / "tinyav"

for p in (TARGET, ROOT):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))


@pytest.fixture
def recorder(tmp_path: Path) -> Iterator[Any]:
    """An active probe recording (as inside a harness attempt), ended afterwards."""
    from harness import probe

    rec = probe._begin(seed=7, platform="cpu", output_dir=tmp_path / "probe-out")
    try:
        yield rec
    finally:
        probe._end()


@pytest.fixture(autouse=True)
def _one_torch_thread() -> Iterator[None]:
    """Run tinyav tests on one intra-op thread (as the scenarios do), restoring it afterwards."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
