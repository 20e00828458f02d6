"""What one run report contributes to the history, as plain rows (pure: no I/O).

Which attempts count is the model's one definition (:mod:`harness.model.counting`): a stage's
samples are the passing final attempts of the measured runs, judged as latency budgets judge
them (wall time less run-queue delay, or wall time for a stage timed on a device); a case's
attempts are every attempt that ran; it is flaky when a run passed only on a retry.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from typing import Any, NamedTuple

from harness.model import Attempt, CaseResult, RunReport, judged_seconds, ran, runs
from harness.worker.envinfo import env_digest

__all__ = ["CaseRow", "CheckRow", "RunRow", "StageRow", "extract"]


@dataclass(frozen=True)
class RunRow:
    run_id: str
    commit: str | None
    dirty: bool | None
    started_at: str
    finished_at: str
    runner: str
    env_digest: str
    platform: str  # the host: OS and machine ("Linux-x86_64")
    merged: bool


@dataclass(frozen=True)
class CaseRow:
    name: str  # the display name, kind/id[platform] (+ " simulated")
    case_id: str
    kind: str
    status: str
    attempts: int
    measured: int
    passed: int
    flaky: bool
    fingerprints: str  # JSON: {"inputs": {name: hash}, "stages": {name: hash}} (ordered)


class StageRow(NamedTuple):
    name: str
    stage: str
    median: float
    lo: float
    hi: float
    n: int
    wall_median: float


class CheckRow(NamedTuple):
    name: str
    check: str
    op: str
    value: float
    passed: bool | None


def case_name(case: CaseResult) -> str:
    """A series' case: its display name, and ``simulated`` apart, never mixed with real runs."""
    return case.name + (" simulated" if case.simulated else "")


def host_platform(env: Any) -> str:
    plat = env.get("platform") if isinstance(env, dict) else None
    if isinstance(plat, dict):
        return f"{plat.get('os') or '?'}-{plat.get('machine') or '?'}"
    return str(plat or "?")


def run_row(report: RunReport) -> RunRow:
    raw_git = report.env.get("git")
    git: dict[str, Any] = raw_git if isinstance(raw_git, dict) else {}
    return RunRow(
        run_id=report.run_id,
        commit=git.get("sha") or None,
        dirty=git.get("dirty"),
        started_at=report.started_at,
        finished_at=report.finished_at,
        runner=report.runner or "?",
        env_digest=env_digest(report.env),
        platform=host_platform(dict(report.env)),
        merged=bool(report.merged_from),
    )


def _median(v: list[float]) -> float:
    return v[0] if len(v) == 1 else statistics.median(v)


def _stage_rows(name: str, passing: list[Attempt]) -> list[StageRow]:
    own: dict[str, list[float]] = {}
    wall: dict[str, list[float]] = {}
    for a in passing:
        judged = judged_seconds(a, contention_free=True)
        for stage, secs in judged_seconds(a, contention_free=False).items():
            on_device = stage in a.stage_device
            own.setdefault(stage, []).append(secs if on_device else judged.get(stage, secs))
            wall.setdefault(stage, []).append(secs)
    return [
        StageRow(
            name,
            stage,
            _median(v),
            min(v),
            max(v),
            len(v),
            _median(wall[stage]),
        )
        for stage, v in own.items()
    ]


def _check_rows(name: str, case: CaseResult) -> list[CheckRow]:
    out = []
    for c in case.checks:
        if c.metric.startswith("latency."):
            continue  # a latency budget's value is its stage's median: the stage series has it
        v = c.value
        if isinstance(v, bool) or not isinstance(v, int | float):
            continue  # a note's string, a check that did not run: no value to plot
        out.append(CheckRow(name, c.name, c.op, float(v), c.passed))
    return out


def _fingerprints(passing: list[Attempt]) -> str:
    if not passing:
        return "{}"
    last = passing[-1]
    doc = {
        "inputs": dict(last.inputs),
        "stages": {k: str(v.get("hash", "")) for k, v in last.fingerprints.items()},
    }
    return json.dumps(doc, separators=(",", ":"))


def case_rows(case: CaseResult) -> tuple[CaseRow, list[StageRow], list[CheckRow]]:
    name = case_name(case)
    measured = runs(case.attempts)
    fs = [r.final for r in measured]
    passing = [a for a in fs if a.status == "passed"]  # counting.passing_finals, runs reused
    row = CaseRow(
        name=name,
        case_id=case.id,
        kind=case.kind,
        status=case.status,
        attempts=len(ran(case.attempts)),
        measured=len(measured),
        passed=sum(a.status == "passed" for a in fs),
        flaky=case.status == "flaky"
        or any(r.retried and r.final.status == "passed" for r in measured),
        fingerprints=_fingerprints(passing),
    )
    return row, _stage_rows(name, passing), _check_rows(name, case)


def extract(
    report: RunReport,
) -> tuple[RunRow, list[CaseRow], list[StageRow], list[CheckRow]]:
    """The rows of one run: the run, its cases (comparison sides other than head excluded:
    a plain run's cases are head), their stages and their checks."""
    cases, stages, checks = [], [], []
    for case in report.cases:
        if case.side != "head":
            continue
        c, s, k = case_rows(case)
        cases.append(c)
        stages.extend(s)
        checks.extend(k)
    return run_row(report), cases, stages, checks
