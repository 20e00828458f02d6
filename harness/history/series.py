"""The series of the history: one per (runner class, host platform, case, what), never mixed.

``what`` is a stage's latency (``stage:<name>``, the median seconds of a run, judged as budgets
judge them), a check's value (``check:<name>``) or the case's pass rate (``pass``: the share of
its measured runs whose final attempt passed). A series' points are in run order (the time each
run started), one per run that has a value.

Example::

    for s in load_series(db, last=200):
        s.key.case, s.key.what, [p.value for p in s.points]
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

__all__ = ["Group", "Point", "RunInfo", "Series", "SeriesKey", "groups", "load_series", "runs_of"]


@dataclass(frozen=True)
class RunInfo:
    pk: int
    run_id: str
    commit: str | None
    started_at: str
    folder: str
    env_digest: str
    batch: int


@dataclass(frozen=True)
class Group:
    """A runner class on a host platform: the runs that may share a series."""

    runner: str
    platform: str

    @property
    def label(self) -> str:
        return f"{self.runner} ({self.platform})"


@dataclass(frozen=True)
class SeriesKey:
    group: Group
    case: str
    what: str  # "stage:<name>" | "check:<name>" | "pass"

    @property
    def kind(self) -> str:
        return self.what.split(":", 1)[0]

    @property
    def metric(self) -> str:
        return self.what.split(":", 1)[1] if ":" in self.what else "pass rate"


class Point(NamedTuple):
    run: RunInfo
    value: float
    lo: float | None = None  # a stage's spread over the run's measured attempts
    hi: float | None = None


@dataclass
class Series:
    key: SeriesKey
    points: list[Point]
    op: str = ""  # a check's op (its direction)

    @property
    def values(self) -> list[float]:
        return [p.value for p in self.points]


def groups(db: sqlite3.Connection) -> list[Group]:
    rows = db.execute("SELECT DISTINCT runner, platform FROM runs ORDER BY runner, platform")
    return [Group(r, p) for r, p in rows]


def runs_of(db: sqlite3.Connection, group: Group, last: int = 0) -> list[RunInfo]:
    """The group's runs in run order; only the ``last`` ones when ``last`` > 0."""
    sql = (
        "SELECT id, run_id, commit_sha, started_at, folder, env_digest, batch FROM runs "
        "WHERE runner = ? AND platform = ? ORDER BY started_at DESC, id DESC"
    )
    params: tuple[object, ...] = (group.runner, group.platform)
    if last > 0:
        sql += " LIMIT ?"
        params += (last,)
    rows = db.execute(sql, params).fetchall()
    return [RunInfo(*r) for r in reversed(rows)]


def _selected(db: sqlite3.Connection, runs: Iterable[RunInfo]) -> None:
    db.execute("CREATE TEMP TABLE IF NOT EXISTS sel (run INTEGER PRIMARY KEY)")
    db.execute("DELETE FROM sel")
    db.executemany("INSERT INTO sel VALUES (?)", [(r.pk,) for r in runs])


def load_series(db: sqlite3.Connection, *, last: int = 0, case: str | None = None) -> list[Series]:
    """Every series (of ``case`` only, when given) over each group's ``last`` runs (all: 0)."""
    out: list[Series] = []
    where = " AND t.name = ?" if case is not None else ""
    extra: tuple[object, ...] = (case,) if case is not None else ()
    for group in groups(db):
        runs = runs_of(db, group, last)
        by_pk = {r.pk: r for r in runs}
        _selected(db, runs)
        found: dict[tuple[str, str], Series] = {}

        def get(
            name: str,
            what: str,
            op: str = "",
            found: dict[tuple[str, str], Series] = found,
            group: Group = group,
        ) -> Series:
            s = found.get((name, what))
            if s is None:
                s = found[(name, what)] = Series(SeriesKey(group, name, what), [], op)
            return s

        for pk, name, stage, median, lo, hi in db.execute(
            "SELECT t.run, t.name, t.stage, t.median, t.lo, t.hi FROM stages t "
            f"JOIN sel ON sel.run = t.run WHERE 1{where}",
            extra,
        ):
            get(name, "stage:" + stage).points.append(Point(by_pk[pk], median, lo, hi))
        for pk, name, check, op, value in db.execute(
            "SELECT t.run, t.name, t.check_name, t.op, t.value FROM checks t "
            f"JOIN sel ON sel.run = t.run WHERE 1{where}",
            extra,
        ):
            get(name, "check:" + check, op).points.append(Point(by_pk[pk], value))
        for pk, name, measured, passed in db.execute(
            f"SELECT t.run, t.name, t.measured, t.passed FROM cases t JOIN sel ON sel.run = t.run"
            f" WHERE t.measured > 0{where}",
            extra,
        ):
            get(name, "pass").points.append(Point(by_pk[pk], passed / measured))
        order = {r.pk: i for i, r in enumerate(runs)}
        for s in found.values():
            s.points.sort(key=lambda p: order[p.run.pk])
        out.extend(found[k] for k in sorted(found))
    return out


def case_runs(
    db: sqlite3.Connection, group: Group, case: str, runs: list[RunInfo]
) -> list[tuple[RunInfo, str, int, int, int, bool, dict[str, dict[str, str]]]]:
    """Per run of ``runs`` that has ``case``: status, attempts, measured, passed, flaky and
    the fingerprints of its last passing run."""
    by_pk = {r.pk: r for r in runs}
    _selected(db, runs)
    rows = db.execute(
        "SELECT t.run, t.status, t.attempts, t.measured, t.passed, t.flaky, t.fingerprints "
        "FROM cases t JOIN sel ON sel.run = t.run WHERE t.name = ?",
        (case,),
    ).fetchall()
    order = {r.pk: i for i, r in enumerate(runs)}
    rows.sort(key=lambda r: order[r[0]])
    return [
        (by_pk[pk], status, att, meas, passed, bool(flaky), json.loads(fps))
        for pk, status, att, meas, passed, flaky, fps in rows
    ]
