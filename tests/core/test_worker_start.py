"""What a persistent worker loads before it says it is ready: the attempt runner (checks,
metrics, media) is a one-off cost of the worker's start, never timed into its first case."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from harness.execution.pool import WorkerPool, WorkerSpec


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/<pid>/maps")
def test_a_persistent_worker_has_the_attempt_runner_loaded_when_ready(tmp_path: Path) -> None:
    pool = WorkerPool(tmp_path / "workers")
    try:
        persistent = pool.get(WorkerSpec("cpu", preimport=()))
        fresh = pool.fresh(WorkerSpec("cpu", preimport=()))
        # PyAV's extension modules are mapped once harness.worker.attempt is imported (through
        # the quality checks): in the persistent worker before any request; a fresh-process
        # worker starts bare, for a cold-import case.
        maps = {h: Path(f"/proc/{h.pid}/maps").read_text() for h in (persistent, fresh)}
        assert "/av/" in maps[persistent]
        assert "/av/" not in maps[fresh]
    finally:
        pool.close()
