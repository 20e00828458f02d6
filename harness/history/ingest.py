"""``harness history ingest``: run folders (plain or merged runs) into the history database.

Each run is one transaction: it is in the database whole or not at all, so a folder that
fails half way (a corrupt ``report.json``, a run still being written) is refused by name and
nothing ingested before it is lost. Ingest is idempotent by run id: a run already there is
skipped (and a different report under an id already ingested is refused, naming both
folders).

Example::

    with contextlib.closing(open_db(Path("history.db"))) as db:
        outcome = ingest(db, [Path("reports/merged")])
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from harness.errors import ReportFormatError
from harness.history.extract import extract
from harness.model import SCHEMA_VERSION, RunReport

__all__ = ["IngestOutcome", "ingest", "run_folders"]


@dataclass
class IngestOutcome:
    added: list[str] = field(default_factory=list)  # run ids
    skipped: list[str] = field(default_factory=list)  # "run id: why"
    refused: list[str] = field(default_factory=list)  # "folder: why"
    batch: int | None = None


def run_folders(paths: Iterable[Path]) -> list[Path]:
    """The run folders named: a folder holding ``report.json`` (or ``attempts.jsonl``: a run
    without its report, refused later by name) is one; any other folder is searched one
    level down (``reports/``, a folder of downloaded CI artifacts)."""
    out: list[Path] = []
    for p in paths:
        if p.is_file() and p.name == "report.json":
            out.append(p.parent)
        elif _is_run(p) or not p.is_dir():
            out.append(p)
        else:
            out.extend(
                sorted(c for c in p.iterdir() if c.is_dir() and not c.is_symlink() and _is_run(c))
            )
    return out


def _is_run(p: Path) -> bool:
    return (p / "report.json").is_file() or (p / "attempts.jsonl").is_file()


def _read(folder: Path) -> tuple[RunReport, str]:
    report_file = folder / "report.json"
    if not folder.is_dir():
        raise ReportFormatError(f"{folder}: no such run folder")
    if not report_file.is_file():
        if (folder / "attempts.jsonl").is_file():
            raise ReportFormatError(
                f"{folder}: half-written run: attempts.jsonl but no report.json (a run still "
                "going, or killed before it wrote its report)"
            )
        raise ReportFormatError(f"{folder}: not a run folder (no report.json)")
    raw = report_file.read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    # Read through the model, not the JSON Schema: validating a 60-case report takes ~0.4 s,
    # which would make a 1,000-run history take minutes; a document the model cannot read
    # (a key missing, a wrong type) is refused by name all the same.
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ReportFormatError(f"{report_file}: not valid JSON (half-written?): {exc}") from None
    if not isinstance(doc, dict) or doc.get("schema_version") != SCHEMA_VERSION:
        got = doc.get("schema_version") if isinstance(doc, dict) else type(doc).__name__
        raise ReportFormatError(
            f"{report_file}: schema_version {got!r} is not supported (expected "
            f"{SCHEMA_VERSION}); re-run the cases with this harness version"
        )
    try:
        report = RunReport.from_json(doc)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ReportFormatError(f"{report_file}: malformed report: missing or bad {exc}") from None
    if report.shard is not None and report.shard.index is not None:
        raise ReportFormatError(
            f"{folder}: shard {report.shard.label} of a run, not the run: ingest the merged "
            "run (harness merge SHARD_DIR... --out DIR)"
        )
    if report.interrupted:
        raise ReportFormatError(
            f"{folder}: run {report.run_id} was interrupted: an incomplete run is not history"
        )
    return report, digest


def _insert(
    db: sqlite3.Connection, report: RunReport, folder: Path, digest: str, batch: int
) -> None:
    run, cases, stages, checks = extract(report)
    cur = db.execute(
        "INSERT INTO runs (run_id, folder, report_sha256, commit_sha, dirty, started_at,"
        " finished_at, runner, env_digest, platform, merged, batch)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            run.run_id,
            str(folder.resolve()),
            digest,
            run.commit,
            None if run.dirty is None else int(run.dirty),
            run.started_at,
            run.finished_at,
            run.runner,
            run.env_digest,
            run.platform,
            int(run.merged),
            batch,
        ),
    )
    pk = cur.lastrowid
    db.executemany(
        "INSERT INTO cases VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (
                pk,
                c.name,
                c.case_id,
                c.kind,
                c.status,
                c.attempts,
                c.measured,
                c.passed,
                int(c.flaky),
                c.fingerprints,
            )
            for c in cases
        ],
    )
    db.executemany(
        "INSERT INTO stages VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [(pk, s.name, s.stage, s.median, s.lo, s.hi, s.n, s.wall_median) for s in stages],
    )
    db.executemany(
        "INSERT INTO checks VALUES (?, ?, ?, ?, ?, ?)",
        [
            (pk, k.name, k.check, k.op, k.value, None if k.passed is None else int(k.passed))
            for k in checks
        ],
    )


def ingest(
    db: sqlite3.Connection,
    folders: Iterable[Path],
    *,
    say: Callable[[str], None] = lambda _line: None,
) -> IngestOutcome:
    """Ingest each run folder in its own transaction; refusals are collected, never raised."""
    out = IngestOutcome()
    for folder in run_folders(folders):
        try:
            report, digest = _read(folder)
        except ReportFormatError as exc:
            out.refused.append(str(exc))
            say(f"refused {exc}")
            continue
        known = db.execute(
            "SELECT folder, report_sha256 FROM runs WHERE run_id = ?", (report.run_id,)
        ).fetchone()
        if known is not None:
            if known[1] != digest:
                msg = (
                    f"{folder}: run id {report.run_id} is already ingested from {known[0]} with "
                    "a different report.json; kept that one"
                )
                out.refused.append(msg)
                say(f"refused {msg}")
            else:
                out.skipped.append(f"{report.run_id}: already ingested")
            continue
        try:
            db.execute("BEGIN IMMEDIATE")
            if out.batch is None:
                now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                out.batch = db.execute("INSERT INTO batches (at) VALUES (?)", (now,)).lastrowid
            assert out.batch is not None
            _insert(db, report, folder, digest, out.batch)
            db.execute("UPDATE batches SET runs = runs + 1 WHERE id = ?", (out.batch,))
            db.execute("COMMIT")
        except (sqlite3.IntegrityError, KeyError, TypeError, ValueError, AttributeError) as exc:
            db.execute("ROLLBACK")
            if out.batch is not None and not out.added:
                out.batch = None  # the batch row went with the rollback
            msg = f"{folder}: run {report.run_id}: inconsistent report ({exc}); nothing of it kept"
            out.refused.append(msg)
            say(f"refused {msg}")
            continue
        except BaseException:
            db.execute("ROLLBACK")
            raise
        out.added.append(report.run_id)
        say(f"ingested {report.run_id} ({len(report.cases)} case(s)) from {folder}")
    return out
