"""``--shard auto``: index and count from each engine's own variables (set here as the engine
sets them), recorded in the shard's report; none found or inconsistent values are usage
errors that name what was looked for."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import harness
from harness.cases.shard_env import ENGINES, detect_shard, resolve_shard
from harness.cli import main
from harness.errors import UsageError
from harness.report.io import read_report

REPO = Path(harness.__file__).resolve().parent.parent
ENGINE_VARS = {v for e in ENGINES for v in e.variables} | {
    "GITHUB_ACTIONS",
    "SLURM_ARRAY_TASK_MAX",
    "SLURM_ARRAY_TASK_STEP",
}


@pytest.mark.parametrize(
    ("environ", "index", "count", "source"),
    [
        (
            {"GITHUB_ACTIONS": "true", "HARNESS_SHARD_INDEX": "3", "HARNESS_SHARD_COUNT": "4"},
            3,
            4,
            "github-actions: HARNESS_SHARD_INDEX=3, HARNESS_SHARD_COUNT=4",
        ),
        (
            {"BUILDKITE_PARALLEL_JOB": "0", "BUILDKITE_PARALLEL_JOB_COUNT": "4"},
            1,
            4,
            "buildkite: BUILDKITE_PARALLEL_JOB=0, BUILDKITE_PARALLEL_JOB_COUNT=4",
        ),
        (
            {"CI_NODE_INDEX": "4", "CI_NODE_TOTAL": "4"},
            4,
            4,
            "gitlab: CI_NODE_INDEX=4, CI_NODE_TOTAL=4",
        ),
        (
            {"JOB_COMPLETION_INDEX": "2", "HARNESS_SHARD_COUNT": "3"},
            3,
            3,
            "kubernetes: JOB_COMPLETION_INDEX=2, HARNESS_SHARD_COUNT=3",
        ),
        (
            # sbatch --array=1-4: tasks 1..4, this is the second
            {
                "SLURM_ARRAY_TASK_ID": "2",
                "SLURM_ARRAY_TASK_MIN": "1",
                "SLURM_ARRAY_TASK_MAX": "4",
                "SLURM_ARRAY_TASK_COUNT": "4",
            },
            2,
            4,
            "slurm: SLURM_ARRAY_TASK_ID=2, SLURM_ARRAY_TASK_MIN=1, SLURM_ARRAY_TASK_COUNT=4, "
            "SLURM_ARRAY_TASK_MAX=4",
        ),
        (
            # the harness's own pair wins over an engine's (a user set it on purpose)
            {
                "HARNESS_SHARD_INDEX": "1",
                "HARNESS_SHARD_COUNT": "2",
                "CI_NODE_INDEX": "2",
                "CI_NODE_TOTAL": "2",
            },
            1,
            2,
            "harness: HARNESS_SHARD_INDEX=1, HARNESS_SHARD_COUNT=2",
        ),
    ],
    ids=["github", "buildkite", "gitlab", "kubernetes", "slurm", "explicit-wins"],
)
def test_each_engine_s_numbering_becomes_a_1_based_shard(
    environ: dict[str, str], index: int, count: int, source: str
) -> None:
    found = detect_shard(environ)
    assert (found.index, found.count, found.source) == (index, count, source)


@pytest.mark.parametrize(
    ("environ", "says"),
    [
        ({"BUILDKITE_PARALLEL_JOB": "4", "BUILDKITE_PARALLEL_JOB_COUNT": "4"}, "outside the count"),
        ({"CI_NODE_INDEX": "0", "CI_NODE_TOTAL": "4"}, "outside the count"),
        ({"JOB_COMPLETION_INDEX": "1"}, "kubernetes sets some of its variables but not HARNESS_"),
        ({"CI_NODE_INDEX": "two", "CI_NODE_TOTAL": "4"}, "CI_NODE_INDEX='two' (gitlab): expected"),
        ({"HARNESS_SHARD_INDEX": "1", "HARNESS_SHARD_COUNT": "0"}, "the count must be at least 1"),
        (
            {"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_MAX": "5",
             "SLURM_ARRAY_TASK_COUNT": "3"},
            "not contiguous",
        ),
        (
            {"CI_NODE_INDEX": "1", "CI_NODE_TOTAL": "2", "BUILDKITE_PARALLEL_JOB": "1",
             "BUILDKITE_PARALLEL_JOB_COUNT": "2"},
            "engines disagree",
        ),
        ({"HARNESS_SHARD_COUNT": "4"}, "set without its index: HARNESS_SHARD_COUNT"),
    ],
)  # fmt: skip
def test_inconsistent_values_are_usage_errors(environ: dict[str, str], says: str) -> None:
    with pytest.raises(UsageError, match="--shard auto") as err:
        detect_shard(environ)
    assert says in str(err.value)


def test_none_found_names_every_variable_looked_for() -> None:
    with pytest.raises(UsageError) as err:
        resolve_shard("auto", {"CI": "true"}, "--harness-shard")
    text = str(err.value)
    assert text.startswith("--harness-shard auto: no engine's shard variables are set")
    for engine in ENGINES:
        assert engine.name in text
        for name in engine.variables:
            assert name in text
    assert resolve_shard("2/4", {}).source == "given"


# ---- through the real commands: `harness run --shard auto` and `pytest --harness-shard auto`

TARGETS = "def ok():\n    pass\n"
CASES = "".join(f'[[case]]\nid = "c{i}"\nkind = "loader"\ntarget = "tmod:ok"\n\n' for i in range(4))


def _env(**engine: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ENGINE_VARS}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")]))
    return {**env, **engine}


def _run(cwd: Path, argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=300,
        check=False,
    )  # fmt: skip


@pytest.mark.slow
def test_shards_told_by_gitlab_and_buildkite_merge_into_the_whole_plan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "tmod.py").write_text(TARGETS)
    (tmp_path / "cases").mkdir()
    (tmp_path / "cases" / "loader.toml").write_text(CASES)
    (tmp_path / "runners").mkdir()  # workers that import neither numpy nor torch: fast
    (tmp_path / "runners" / "cpu.toml").write_text(
        'name = "cpu"\nplatform = "cpu"\npreimport = []\n'
    )
    cli = ["-m", "harness.cli", "run", "--code-root", "code", "-q", "--shard", "auto"]

    for name in ENGINE_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--code-root", "code", "-q", "--shard", "auto", "--out", "none"]) == 2
    err = capsys.readouterr().err
    assert "--shard auto: no engine's shard variables are set" in err
    assert "BUILDKITE_PARALLEL_JOB" in err and "SLURM_ARRAY_TASK_ID" in err
    assert not (tmp_path / "none").exists()  # nothing run, nothing written

    # shard 1 of 2 on GitLab (1-based CI_NODE_INDEX) through `harness run`
    gitlab = _env(CI_NODE_INDEX="1", CI_NODE_TOTAL="2")
    one = _run(tmp_path, [*cli, "--out", "shards", "--run-id", "one"], gitlab)
    assert one.returncode == 0, one.stderr
    assert "(gitlab: CI_NODE_INDEX=1, CI_NODE_TOTAL=2)" in one.stderr
    first = read_report(tmp_path / "shards" / "one")  # schema-checked on read
    assert (
        first.shard is not None and first.shard.source == "gitlab: CI_NODE_INDEX=1, CI_NODE_TOTAL=2"
    )

    # shard 2 of 2 on Buildkite (0-based BUILDKITE_PARALLEL_JOB) through the pytest plugin
    two = _run(
        tmp_path,
        [
            "-m", "pytest", str(REPO / "harness"), "-p", "no:cacheprovider", "-p", "no:xdist",
            f"--rootdir={tmp_path}", "--harness-cases", "cases", "--harness-code-root", "code",
            "--harness-out", "shards", "--harness-shard", "auto",
        ],
        _env(BUILDKITE_PARALLEL_JOB="1", BUILDKITE_PARALLEL_JOB_COUNT="2"),
    )  # fmt: skip
    assert two.returncode == 0, two.stdout
    second = next(
        read_report(d) for d in (tmp_path / "shards").iterdir() if d.name not in ("one", "latest")
    )
    assert second.shard is not None and second.shard.index == 2
    assert (
        second.shard.source == "buildkite: BUILDKITE_PARALLEL_JOB=1, BUILDKITE_PARALLEL_JOB_COUNT=2"
    )
    assert second.shard.digest == first.shard.digest  # one plan, whoever numbered the shard

    assert main(["merge", "shards", "--out", "m"]) == 0
    report = read_report(tmp_path / "m")
    assert sorted(c.id for c in report.cases) == ["c0", "c1", "c2", "c3"] and not report.missing
