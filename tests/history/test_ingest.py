"""``harness history ingest``: idempotent by run id, every row traceable to its run folder, a
corrupt or half-written folder refused by name with nothing already ingested lost."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from history_synth import Truth, write_history

from harness.cli import main as cli
from harness.history.db import SCHEMA_VERSION


def _rows(db: Path, sql: str) -> list[tuple[object, ...]]:
    con = sqlite3.connect(db)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_ingest_is_idempotent_traceable_and_refuses_bad_folders_by_name(
    planted: Truth, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "h.db"
    first = planted.folders[:20]
    assert cli(["history", "ingest", *map(str, first), "--db", str(db), "-q"]) == 0
    assert "20 run(s) ingested" in capsys.readouterr().out
    assert _rows(db, "PRAGMA journal_mode") == [("wal",)]
    assert _rows(db, "SELECT value FROM meta") == [(str(SCHEMA_VERSION),)]

    bad = tmp_path / "bad"
    truncated = bad / "truncated"
    truncated.mkdir(parents=True)
    text = (planted.folders[25] / "report.json").read_text()
    (truncated / "report.json").write_text(text[: len(text) // 2])
    half = bad / "half"
    half.mkdir()
    (half / "attempts.jsonl").write_text("{}\n")
    # a run whose stage seconds are not numbers: fails half way through its rows
    broken = bad / "broken"
    broken.mkdir()
    doc = json.loads((planted.folders[26] / "report.json").read_text())
    doc["run_id"] = "broken-run"
    doc["cases"][2]["attempts"][0]["stages"]["Stage01"] = "slow"
    (broken / "report.json").write_text(json.dumps(doc))
    # the first 20 again (skipped), the bad ones, and the rest (ingested)
    rest = [str(f) for f in planted.folders[20:]]
    code = cli(["history", "ingest", *map(str, first), str(bad), *rest, "--db", str(db), "-q"])
    out, err = capsys.readouterr()
    assert code == 2
    assert f"refused {truncated}/report.json: not valid JSON" in err
    assert f"refused {half}: half-written run: attempts.jsonl but no report.json" in err
    assert f"refused {broken}: run broken-run" in err
    assert f"{len(rest)} run(s) ingested, 20 already there, 3 refused" in out
    # nothing of the broken run, everything of the others, each traceable to its folder
    assert _rows(db, "SELECT count(*) FROM runs") == [(len(planted.folders),)]
    assert _rows(db, "SELECT count(*) FROM stages WHERE run NOT IN (SELECT id FROM runs)") == [(0,)]
    folders = dict(_rows(db, "SELECT run_id, folder FROM runs"))
    assert folders["run-0003"] == str(planted.folders[3].resolve())
    commit, n_stage_rows = _rows(
        db,
        "SELECT r.commit_sha, count(*) FROM stages s JOIN runs r ON r.id = s.run "
        "WHERE r.run_id = 'run-0031' AND s.name = 'pipeline/case-00[cpu]'",
    )[0]
    assert commit == planted.commits[31] and n_stage_rows == 5  # 4 stages and total
    flaky = _rows(
        db,
        "SELECT count(*) FROM cases c JOIN runs r ON r.id = c.run WHERE c.flaky = 1 AND "
        "c.name = 'pipeline/case-01[cpu]' AND r.run_id BETWEEN 'run-0012' AND 'run-0019'",
    )
    assert flaky[0][0] >= 1


def test_a_changed_report_under_an_ingested_run_id_is_refused(
    planted: Truth, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "h.db"
    assert cli(["history", "ingest", str(planted.folders[0]), "--db", str(db), "-q"]) == 0
    copy = tmp_path / "copy"
    shutil.copytree(planted.folders[0], copy)
    doc = json.loads((copy / "report.json").read_text())
    doc["finished_at"] = "2027-01-01T00:00:00+00:00"
    (copy / "report.json").write_text(json.dumps(doc))
    assert cli(["history", "ingest", str(copy), "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert "run id run-0000 is already ingested from" in err and "kept that one" in err


def test_another_schema_version_is_refused_with_what_to_do(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    con.execute("INSERT INTO meta VALUES ('schema_version', '99')")
    con.commit()
    con.close()
    other = tmp_path / "runs"
    write_history(other, runs=1, cases=1, stages=1)
    assert cli(["history", "ingest", str(other), "--db", str(db)]) == 2


def test_runner_classes_are_separate_series(planted: Truth, tmp_path: Path) -> None:
    """The same case on another runner class is another series, never mixed in."""
    from harness.history.db import open_db
    from harness.history.series import load_series

    other = write_history(tmp_path / "h100", runs=4, cases=1, stages=1, runner="h100", first=50)
    db_path = tmp_path / "h.db"
    folders = [*map(str, planted.folders[:5]), *map(str, other.folders)]
    assert cli(["history", "ingest", *folders, "--db", str(db_path), "-q"]) == 0
    db = open_db(db_path, create=False)
    try:
        series = [s for s in load_series(db) if s.key.what == "stage:Stage00"]
    finally:
        db.close()
    by_runner = {
        s.key.group.runner: [p.run.run_id for p in s.points]
        for s in series
        if s.key.case == "pipeline/case-00[cpu]"
    }
    assert by_runner == {
        "cpu": [f"run-{i:04d}" for i in range(5)],
        "h100": [f"run-{i:04d}" for i in range(50, 54)],
    }
