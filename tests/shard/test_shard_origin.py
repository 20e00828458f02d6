"""`harness merge` refuses a stale shard: one whose code under test has another git tree hash
(a shard of another commit), or whose plan has another nonce (a shard of another plan of the
same case list, e.g. another CI run). Shard folders are written by the real writer and merged
through the CLI; no worker starts."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cases.plan import build_plan
from harness.cases.shard import plan_nonce, split
from harness.errors import UsageError
from harness.model import Attempt, Case, CaseResult, RunReport
from harness.report.io import write_run
from harness.worker.envinfo import collect_env

ENV = collect_env(None)  # this process's real environment; the git state is set per shard


def shard_folder(root: Path, index: int, *, tree: str, nonce: str | None) -> Path:
    cases = [Case(id=i, kind="quant", source="cases/q.toml", target="m:f") for i in "abcd"]
    plan = split(build_plan(cases, ["cpu"]), 2, nonce=nonce)
    report = RunReport(
        run_id=f"shard{index}",
        started_at="2026-01-01T00:00:00+00:00",
        finished_at="2026-01-01T00:01:00+00:00",
        argv=("harness", "run", "--shard", f"{index}/2"),
        runner="cpu",
        env={**ENV, "git": {"sha": "0" * 40, "dirty": False, "tree_hash": tree, "reason": None}},
        cases=tuple(
            CaseResult(
                it.case.id,
                it.case.kind,
                it.platform,
                "passed",
                source=it.case.source,
                attempts=(Attempt(it.case.id, it.platform, 0, "passed", 0, duration_s=0.1),),
            )
            for it in plan.items_of(index)
        ),
        shard=plan.info(index),
    )
    folder = root / f"shard-{index}-{tree}-{nonce}"
    folder.mkdir(parents=True)
    write_run(dataclasses.replace(report), folder, latest=False)
    return folder


def merge(*folders: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", "merge", *map(str, folders), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_shards_of_one_commit_and_plan_merge(tmp_path: Path) -> None:
    one = shard_folder(tmp_path, 1, tree="blake3:aa", nonce="run-7")
    two = shard_folder(tmp_path, 2, tree="blake3:aa", nonce="run-7")
    proc = merge(one, two, out=tmp_path / "m")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "m" / "report.json").read_text())
    assert doc["shard"]["plan_nonce"] == "run-7"


def test_a_shard_of_another_commit_is_refused_naming_its_folder(tmp_path: Path) -> None:
    one = shard_folder(tmp_path, 1, tree="blake3:aa", nonce="run-7")
    stale = shard_folder(tmp_path, 2, tree="blake3:bb", nonce="run-7")
    proc = merge(one, stale, out=tmp_path / "m")
    assert proc.returncode == 2, proc.stderr
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert str(stale) in line and "git tree blake3:bb" in line and "another commit" in line
    assert not (tmp_path / "m" / "report.json").exists()


def test_a_shard_of_another_plan_of_the_same_cases_is_refused_naming_its_folder(
    tmp_path: Path,
) -> None:
    one = shard_folder(tmp_path, 1, tree="blake3:aa", nonce="run-7")
    other = shard_folder(tmp_path, 2, tree="blake3:aa", nonce="run-8")
    proc = merge(one, other, out=tmp_path / "m")
    assert proc.returncode == 2, proc.stderr
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert str(other) in line and "plan nonce run-8" in line and "run-7" in line


def test_the_nonce_comes_from_the_flag_else_the_ci_run_id() -> None:
    assert plan_nonce("x", {"GITHUB_RUN_ID": "5"}) == "x"
    assert plan_nonce(None, {"HARNESS_PLAN_NONCE": "n", "GITHUB_RUN_ID": "5"}) == "n"
    assert plan_nonce(None, {"GITHUB_RUN_ID": "5", "GITHUB_RUN_ATTEMPT": "2"}) == "github-run-5"
    assert plan_nonce(None, {}) is None
    with pytest.raises(UsageError, match="--plan-nonce"):
        plan_nonce(" ", {})


def test_plan_shows_the_nonce_every_shard_must_share(tmp_path: Path) -> None:
    (tmp_path / "cases").mkdir()
    (tmp_path / "cases" / "a.toml").write_text('id = "a"\nkind = "quant"\ntarget = "m:f"\n')
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "plan", "--shards", "2", "--plan-nonce", "ci-42",
         "--json"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["plan_nonce"] == "ci-42"
