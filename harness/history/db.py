"""The history database: one SQLite file (WAL), its schema and its version.

Every row carries the run it came from (``runs.folder`` is where that run's folder was when it
was ingested), so any figure on the site or in ``history check`` is traceable to a
``report.json``. A database written by another schema version is refused with what to do.

Tables: ``runs`` (one per ingested run: commit, times, runner class, environment digest, host
platform), ``cases`` (status, attempts, flakiness, the fingerprints of its last passing run),
``stages`` (per case and stage: median and spread of the seconds judged), ``checks`` (per case
and check: the value), ``batches`` (one per ``ingest`` call that added runs), ``meta``.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from harness.errors import InputError

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS batches (
    id INTEGER PRIMARY KEY, at TEXT NOT NULL, runs INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL UNIQUE,
    folder TEXT NOT NULL,
    report_sha256 TEXT NOT NULL,
    commit_sha TEXT,
    dirty INTEGER,
    started_at TEXT NOT NULL,
    finished_at TEXT NOT NULL,
    runner TEXT NOT NULL,
    env_digest TEXT NOT NULL,
    platform TEXT NOT NULL,
    merged INTEGER NOT NULL,
    batch INTEGER NOT NULL REFERENCES batches(id)
);
CREATE INDEX IF NOT EXISTS runs_series ON runs(runner, platform, started_at);
CREATE TABLE IF NOT EXISTS cases (
    run INTEGER NOT NULL REFERENCES runs(id),
    name TEXT NOT NULL,
    case_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    status TEXT NOT NULL,
    attempts INTEGER NOT NULL,
    measured INTEGER NOT NULL,
    passed INTEGER NOT NULL,
    flaky INTEGER NOT NULL,
    fingerprints TEXT NOT NULL,
    PRIMARY KEY (run, name)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS cases_by_name ON cases(name);
CREATE TABLE IF NOT EXISTS stages (
    run INTEGER NOT NULL REFERENCES runs(id),
    name TEXT NOT NULL,
    stage TEXT NOT NULL,
    median REAL NOT NULL,
    lo REAL NOT NULL,
    hi REAL NOT NULL,
    n INTEGER NOT NULL,
    wall_median REAL NOT NULL,
    PRIMARY KEY (run, name, stage)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS checks (
    run INTEGER NOT NULL REFERENCES runs(id),
    name TEXT NOT NULL,
    check_name TEXT NOT NULL,
    op TEXT NOT NULL,
    value REAL NOT NULL,
    passed INTEGER,
    PRIMARY KEY (run, name, check_name)
) WITHOUT ROWID;
"""


def open_db(path: Path, *, create: bool = True) -> sqlite3.Connection:
    """The database at ``path`` (created with the current schema when ``create`` and absent),
    in WAL mode; an unreadable file or another schema version is an :class:`InputError`."""
    if not create and not path.is_file():
        raise InputError(
            f"{path}: no such history database (create it with harness history "
            "ingest RUN_DIR... --db PATH)"
        )
    if create:
        path.parent.mkdir(parents=True, exist_ok=True)
    try:
        db = sqlite3.connect(path, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA foreign_keys=ON")
        row = _version(db)
    except sqlite3.DatabaseError as exc:
        raise InputError(f"{path}: not a history database: {exc}") from exc
    if row is None:
        db.executescript("BEGIN;" + _SCHEMA + "COMMIT;")
        db.execute(
            "INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
        )
    elif row != str(SCHEMA_VERSION):
        db.close()
        raise InputError(
            f"{path}: history schema version {row} (this harness reads version "
            f"{SCHEMA_VERSION}); re-create it: harness history ingest RUN_DIR... --db NEW_PATH"
        )
    return db


def _version(db: sqlite3.Connection) -> str | None:
    has_meta = db.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'"
    ).fetchone()
    if not has_meta:
        return None
    row = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    return None if row is None else str(row[0])
