"""Usage errors of the sharding options, before anything runs or is written; and the schema of
the sharded report keys kept equal to what the records write."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cli import main
from harness.model import MergedShard, MissingCase, PlannedCase
from harness.report.schema import load_report_schema


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["run", "--durations", "r.json"], "--durations: only with --shard I/N"),
        (["run", "--shard-by", "file"], "--shard-by: only with --shard I/N"),
        (["plan", "--durations", "r.json"], "--durations: only with --shards N"),
        (["plan", "--json"], "--json: only with --shards N"),
        (["plan", "--shards", "0"], "--shards 0: expected an integer from 1 to 1000"),
        (["run", "--shard", "1/2", "--durations", "nope.json"], "nope.json: no such report"),
    ],
)
def test_split_options_without_a_split_are_usage_errors(
    argv: list[str],
    says: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cases").mkdir()
    assert main(argv) == 2
    assert says in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == [tmp_path / "cases"]  # nothing written


def test_merge_refuses_a_used_out_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "x").write_text("")
    assert main(["merge", str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    assert "exists and is not an empty folder" in capsys.readouterr().err


def test_merge_says_when_a_folder_has_no_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "empty").mkdir()
    assert main(["merge", str(tmp_path / "empty"), "--out", str(tmp_path / "m")]) == 2
    assert f"{tmp_path / 'empty'}: no report.json in it" in capsys.readouterr().err
    assert not (tmp_path / "m").exists()


def test_schema_of_sharded_keys_matches_the_records() -> None:
    schema = load_report_schema()
    defs, props = schema["$defs"], schema["properties"]
    planned = PlannedCase("a", "loader", "cpu", 1, 1.0).to_json()
    missing = MissingCase("a", "loader", "cpu", "why", "fail_fast").to_json()
    merged = MergedShard(1, "r", "p").to_json()
    assert set(defs["planned_case"]["required"]) == set(planned)
    assert set(defs["missing_case"]["required"]) == set(missing)
    assert set(props["merged_from"]["items"]["required"]) == set(merged)
    assert set(props["shard"]["required"]) == {"index", "count", "plan_digest", "by", "plan"}
