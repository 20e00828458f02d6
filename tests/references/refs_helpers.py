"""Helpers for the reference-store tests: hand-built run folders with real safetensors files."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors.numpy import save_file

from harness.model import Attempt, CaseResult, CheckResult, ErrorInfo, RunReport
from harness.probe import content_hash

ENV = {
    "python": {"version": "3.11.9"},
    "torch": {"version": "2.13.0"},
    "ffmpeg": "8.1",
    "hostname": "ci-runner-7",
}


def video(seed: int = 0, frames: int = 4, size: int = 32) -> np.ndarray:
    """A textured uint8 video [T, H, W, 3]: smooth gradients plus seeded noise."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:size, 0:size]
    out = []
    for t in range(frames):
        base = (x * 4 + y * 3 + t * 10) % 256
        noise = rng.integers(-20, 21, size=(size, size, 3))
        out.append(np.clip(base[..., None] + noise, 0, 255))
    return np.stack(out).astype(np.uint8)


def audio(n: int = 8000, rate: int = 16000) -> np.ndarray:
    # A chirp (200 Hz up to 2 kHz), not a pure tone: a periodic signal has no unique lag, so a
    # shift by whole periods could never be measured (cross-correlation aliases it).
    t = np.arange(n) / rate
    sweep = 200.0 * t + 0.5 * (1800.0 / (n / rate)) * t**2
    return (0.5 * np.sin(2 * np.pi * sweep))[None, :].astype(np.float32)


Output = tuple[str, np.ndarray, Mapping[str, Any]]  # kind, array, meta


def _attempt(
    run: Path,
    case_id: str,
    index: int,
    outputs: Mapping[str, Output],
    platform: str = "cpu",
    **kw: Any,
) -> Attempt:
    recorded: dict[str, dict[str, Any]] = {}
    for name, (kind, array, meta) in outputs.items():
        rel = Path("attempts") / f"{case_id}-{index}" / f"{name}.safetensors"
        (run / rel).parent.mkdir(parents=True, exist_ok=True)
        save_file({"data": np.ascontiguousarray(array)}, str(run / rel))
        nonfinite = int(array.size - np.isfinite(array).sum()) if array.dtype.kind == "f" else 0
        recorded[name] = {
            "kind": kind,
            "hash": content_hash(array),  # what probe.output records for an array
            "dtype": str(array.dtype),
            "shape": list(array.shape),
            "nonfinite": nonfinite,
            "path": rel.as_posix(),
            "meta": dict(meta),
        }
    return Attempt(
        case_id=case_id,
        platform=platform,
        index=index,
        seed=0,
        outputs=recorded,
        **{"status": "passed", **kw},
    )


MakeRun = Callable[..., Path]


@pytest.fixture
def make_run(tmp_path: Path) -> MakeRun:
    """``make_run(name, {case_id: {output: (kind, array, meta)}})`` -> run folder.

    ``before`` adds earlier attempts per case: ``[(outputs, Attempt keyword overrides)]``;
    ``checks`` are the last attempt's checks, ``case_checks`` the case-level ones (which the
    case result lists after them, as the aggregator does).
    """

    def make(
        name: str,
        cases: Mapping[str, Mapping[str, Output]],
        *,
        before: Mapping[str, list[tuple[Mapping[str, Output], dict[str, Any]]]] | None = None,
        status: str = "passed",
        error: ErrorInfo | None = None,
        checks: tuple[CheckResult, ...] = (),
        case_checks: tuple[CheckResult, ...] = (),
        platform: str = "cpu",
        simulated: bool = False,
    ) -> Path:
        run = tmp_path / "runs" / name
        run.mkdir(parents=True)
        results = []
        for case_id, outputs in cases.items():
            attempts = [
                _attempt(run, case_id, i, outs, platform, **kw)
                for i, (outs, kw) in enumerate((before or {}).get(case_id, []))
            ]
            attempts.append(
                _attempt(
                    run,
                    case_id,
                    len(attempts),
                    outputs,
                    platform,
                    status=status,
                    error=error,
                    checks=checks,
                )
            )
            results.append(
                CaseResult(
                    id=case_id,
                    kind="pipeline",
                    platform=platform,
                    status="passed",
                    simulated=simulated,
                    checks=(*checks, *case_checks),
                    attempts=tuple(attempts),
                )
            )
        report = RunReport(
            run_id=name,
            started_at="2026-01-01T00:00:00+00:00",
            finished_at="2026-01-01T00:01:00+00:00",
            argv=("harness", "run"),
            runner="cpu",
            env=ENV,
            cases=tuple(results),
        )
        (run / "report.json").write_text(json.dumps(report.to_json()))
        return run

    return make


@pytest.fixture
def store_root(tmp_path: Path) -> Path:
    return tmp_path / "references"
