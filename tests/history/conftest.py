"""Shared histories for the history tests: a synthetic one (run folders written by the real
model and writer, bench/history_synth.py) built once per session."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

from histories import RUNS, STEP_AT  # noqa: E402
from history_synth import Truth, write_history  # noqa: E402


@pytest.fixture(scope="session")
def planted(tmp_path_factory: pytest.TempPathFactory) -> Truth:
    out = tmp_path_factory.mktemp("planted")
    return write_history(
        out / "runs",
        runs=RUNS,
        cases=3,
        stages=4,
        noise=0.03,
        steps={STEP_AT: 1.2},
        flaky=(12, 20),
        seed=3,
    )
