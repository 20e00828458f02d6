"""Synthetic histories of main: valid run folders (``report.json`` written by the real model
and writer) for the history benchmarks and tests.

Each run is one commit; each case has ``stages`` stages whose seconds are a base value times
log-normal noise (``noise``: the standard deviation of the log, 0.05 = about 5 %), times the
product of every planted step at or before that run (``steps``: run index -> factor, applied
to every stage of ``step_cases``). During the ``flaky`` runs (start, stop) a case fails its
first try in every third run and passes its retry (status flaky), and its passing
latency is noisier (one stage in five reads up to 30 % slower): what a flaky period looks
like, and what must not read as a change point.

Example::

    truth = write_history(Path("runs"), runs=200, cases=4, stages=5, steps={100: 1.10})
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from harness.fsio import write_json_atomic
from harness.model import Attempt, CaseResult, CheckResult, ErrorInfo, RunReport

START = datetime(2026, 9, 1, tzinfo=UTC)


def env(commit: str, runner_name: str = "ci-cpu-1") -> dict[str, Any]:
    """An environment as ``collect_env`` records one (the keys the schema requires)."""
    return {
        "python": {"version": "3.11.7", "implementation": "CPython", "executable": "python"},
        "platform": {"os": "Linux", "release": "6.8", "machine": "x86_64"},
        "torch": {"version": "2.13.0+cpu", "cuda": None, "hip": None},
        "devices": [],
        "device_count": 0,
        "driver": None,
        "triton": None,
        "numpy": "2.4.6",
        "scipy": "1.17.1",
        "scikit_image": "0.26.0",
        "av": "18.1.0",
        "ffmpeg": "8.1.2",
        "safetensors": "0.8.0",
        "blake3": "1.0.11",
        "hostname": runner_name,
        "runner_name": runner_name,
        "ci": True,
        "ci_provider": "github",
        "git": {"sha": commit, "dirty": False, "tree_hash": "blake3:" + commit, "reason": None},
    }


def commit_of(i: int) -> str:
    return hashlib.sha1(f"commit {i}".encode()).hexdigest()


@dataclass
class Truth:
    """What was planted: the folders, the step runs and their factors, the flaky runs."""

    folders: list[Path] = field(default_factory=list)
    commits: list[str] = field(default_factory=list)
    steps: Mapping[int, float] = field(default_factory=dict)
    flaky: tuple[int, int] = (0, 0)


def _case(
    cid: str,
    stages: Sequence[tuple[str, float]],
    rng: random.Random,
    factor: float,
    noise: float,
    flaky: bool,
    retried: bool,
    started: str,
    prints: Mapping[str, str],
) -> CaseResult:
    secs = {}
    for name, base in stages:
        v = base * factor * math.exp(rng.gauss(0.0, noise))
        if flaky and rng.random() < 0.2:
            v *= 1.0 + 0.3 * rng.random()
        secs[name] = v
    fps = {
        k: {
            "hash": h,
            "dtype": "float32",
            "shape": [4],
            "nonfinite": 0,
            "min": 0.0,
            "max": 1.0,
            "mean": 0.5,
        }
        for k, h in prints.items()
    }
    ssim = CheckResult(
        "ssim", "ssim", round(0.995 - abs(rng.gauss(0, 0.001)), 6), ">=", 0.98, "fail", True
    )
    passing = Attempt(
        case_id=cid,
        platform="cpu",
        index=0,
        status="passed",
        seed=0,
        stages=secs,
        fingerprints=fps,
        inputs={"prompt": "sha256:" + "1" * 12},
        checks=(ssim,),
        duration_s=sum(secs.values()) * 1.02,
        started_at=started,
    )
    attempts: tuple[Attempt, ...] = (passing,)
    status = "passed"
    if retried:
        failed = Attempt(
            case_id=cid,
            platform="cpu",
            index=0,
            status="error",
            seed=0,
            started_at=started,
            error=ErrorInfo.make("RuntimeError", "NCCL timeout", where="stack.io:read"),
        )
        attempts = (failed, Attempt(**{**passing.__dict__, "index": 1, "retry": 1}))
        status = "flaky"
    return CaseResult(
        id=cid,
        kind="pipeline",
        platform="cpu",
        status=status,
        checks=(ssim,),
        attempts=attempts,
        seed=0,
    )


def write_history(
    out: Path,
    *,
    runs: int,
    cases: int = 4,
    stages: int = 5,
    noise: float = 0.05,
    steps: Mapping[int, float] | None = None,
    step_cases: Sequence[int] = (0,),
    flaky: tuple[int, int] = (0, 0),
    flaky_cases: Sequence[int] = (1,),
    seed: int = 0,
    runner: str = "cpu",
    first: int = 0,
) -> Truth:
    """Write ``runs`` run folders ``out/run-NNNN`` (run indexes from ``first``)."""
    rng = random.Random(seed)
    steps = dict(steps or {})
    stage_names = [(f"Stage{s:02d}", 0.01 * (1 + s % 7)) for s in range(stages)]
    truth = Truth(steps=steps, flaky=flaky)
    for i in range(first, first + runs):
        commit = commit_of(i)
        started = START + timedelta(hours=i)
        factor = math.prod(f for at, f in steps.items() if i >= at)
        results = []
        for c in range(cases):
            stepped = c in step_cases
            # the fingerprint after the stepped stage changes with the step (what a change
            # to the code under test does): the first-divergence hint names it
            prints = {
                name: hashlib.sha1(
                    f"{c}:{name}:{factor if stepped and s >= 1 else 1}".encode()
                ).hexdigest()[:16]
                for s, (name, _) in enumerate(stage_names[:3])
            }
            results.append(
                _case(
                    f"case-{c:02d}",
                    stage_names,
                    rng,
                    factor if stepped else 1.0,
                    noise,
                    c in flaky_cases and flaky[0] <= i < flaky[1],
                    c in flaky_cases and flaky[0] <= i < flaky[1] and i % 3 == 0,
                    started.isoformat(),
                    prints,
                )
            )
        run_id = f"run-{i:04d}"
        report = RunReport(
            run_id=run_id,
            started_at=started.isoformat(),
            finished_at=(started + timedelta(minutes=5)).isoformat(),
            argv=("harness", "run"),
            runner=runner,
            env=env(commit),
            cases=tuple(results),
        )
        folder = out / run_id
        folder.mkdir(parents=True, exist_ok=True)
        write_json_atomic(folder / "report.json", report.to_json(), indent=None)
        truth.folders.append(folder)
        truth.commits.append(commit)
    return truth
