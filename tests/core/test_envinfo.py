"""Tests for harness.envinfo: the env fingerprint and the git state of the code under test."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from harness.worker import envinfo
from harness.worker.envinfo import ENV_KEYS, OPTIONAL_ENV_KEYS, collect_env, env_digest, git_state

_CI_VARS = (
    "CI",
    "GITHUB_ACTIONS",
    "GITLAB_CI",
    "BUILDKITE",
    "JENKINS_URL",
    "TF_BUILD",
    "RUNNER_NAME",
    "CI_RUNNER_DESCRIPTION",
    "BUILDKITE_AGENT_NAME",
    "NODE_NAME",
    "AGENT_NAME",
)


def _git(repo: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    out = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args],
        cwd=repo,
        check=True,
        capture_output=True,
        text=True,
        env=env,
    )
    return out.stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    r = tmp_path / "repo"
    (r / "sub").mkdir(parents=True)
    (r / "a.txt").write_text("alpha\n")
    (r / "sub" / "b.txt").write_text("beta\n")
    _git(r, "init", "-q")
    _git(r, "add", "-A")
    _git(r, "commit", "-q", "-m", "init")
    return r


@pytest.fixture(scope="module")
def env() -> dict[str, Any]:
    return collect_env(None)


def test_collect_env_has_every_field(env: dict[str, Any]) -> None:
    import numpy
    import torch

    assert set(env) == set(ENV_KEYS) | set(OPTIONAL_ENV_KEYS)
    assert set(env["python"]) == {"version", "implementation", "executable", "prefix"}
    assert set(env["platform"]) == {"os", "release", "machine"}
    assert env["torch"]["version"] == str(torch.__version__)
    assert env["torch"]["cuda"] == torch.version.cuda
    assert env["torch"]["hip"] == getattr(torch.version, "hip", None)
    if not torch.cuda.is_available():
        assert env["devices"] == []
    assert env["device_count"] == len(env["devices"])
    assert env["numpy"] == numpy.__version__
    for key in ("scipy", "scikit_image", "av", "safetensors", "blake3", "ffmpeg", "hostname"):
        assert isinstance(env[key], str) and env[key], key
    assert isinstance(env["ci"], bool)
    assert env["git"] == {
        "sha": None,
        "dirty": None,
        "tree_hash": None,
        "reason": "no code root given",
    }


def test_collect_env_is_json_ready(repo: Path) -> None:
    import json

    env = collect_env(repo)
    json.dumps(env, allow_nan=False)


def test_runner_name_and_ci_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in _CI_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOSTNAME", "box-1")
    env = collect_env(None)
    assert (env["runner_name"], env["ci"], env["ci_provider"]) == ("box-1", False, None)

    monkeypatch.setenv("CI", "true")
    assert collect_env(None)["ci"] is True

    monkeypatch.setenv("CI_RUNNER_DESCRIPTION", "gitlab-mi300x-3")
    env = collect_env(None)
    assert (env["runner_name"], env["ci"], env["ci_provider"]) == (
        "gitlab-mi300x-3",
        True,
        "gitlab",
    )


def test_git_state_tracks_working_tree(repo: Path) -> None:
    clean = git_state(repo)
    assert clean["sha"] == _git(repo, "rev-parse", "HEAD")
    assert clean["dirty"] is False
    assert clean["reason"] is None
    assert str(clean["tree_hash"]).startswith("blake3:")

    # Untracked files are not code under test.
    (repo / "scratch.log").write_text("noise")
    assert git_state(repo) == clean

    (repo / "a.txt").write_text("alpha, edited\n")
    edited = git_state(repo)
    assert edited["dirty"] is True
    assert edited["sha"] == clean["sha"]
    assert edited["tree_hash"] != clean["tree_hash"]

    # The hash is of content, so undoing the edit restores it.
    (repo / "a.txt").write_text("alpha\n")
    assert git_state(repo) == clean

    (repo / "sub" / "b.txt").unlink()
    deleted = git_state(repo)
    assert deleted["dirty"] is True
    assert deleted["tree_hash"] not in (clean["tree_hash"], edited["tree_hash"])


def test_git_state_sees_mode_change(repo: Path) -> None:
    clean = git_state(repo)
    p = repo / "a.txt"
    p.chmod(p.stat().st_mode | stat.S_IXUSR)
    changed = git_state(repo)
    assert changed["dirty"] is True
    assert changed["tree_hash"] != clean["tree_hash"]


def test_git_state_of_subfolder_ignores_siblings(repo: Path) -> None:
    before = git_state(repo / "sub")
    (repo / "a.txt").write_text("edited outside sub\n")
    after = git_state(repo / "sub")
    assert after == before
    assert after["dirty"] is False
    (repo / "sub" / "b.txt").write_text("edited inside\n")
    assert git_state(repo / "sub")["tree_hash"] != before["tree_hash"]


def test_git_state_before_first_commit(tmp_path: Path) -> None:
    _git(tmp_path, "init", "-q")
    (tmp_path / "x.py").write_text("x = 1\n")
    _git(tmp_path, "add", "x.py")
    state = git_state(tmp_path)
    assert state["sha"] is None
    assert state["tree_hash"] is not None
    assert "no commit" in state["reason"]


def test_git_state_not_a_checkout(tmp_path: Path) -> None:
    state = collect_env(tmp_path)["git"]
    assert (state["sha"], state["dirty"], state["tree_hash"]) == (None, None, None)
    assert "not a git checkout" in state["reason"]
    missing = git_state(tmp_path / "nope")
    assert "not a directory" in missing["reason"]


def test_env_digest_covers_comparability_fields(env: dict[str, Any]) -> None:
    d = env_digest(env)
    assert len(d) == 16 and d == env_digest(dict(env))
    # Git state and paths differ between base and head: they must not change the digest.
    moved = {
        **env,
        "git": {"sha": "f" * 40, "dirty": True, "tree_hash": "x", "reason": None},
        "python": {**env["python"], "executable": "/elsewhere/python"},
    }
    assert env_digest(moved) == d
    for changed in (
        {**env, "torch": {**env["torch"], "version": "0.0.1"}},
        {**env, "torch": {**env["torch"], "hip": "6.2"}},
        {**env, "devices": [{"name": "NVIDIA H100"}]},
        {**env, "ffmpeg": "0.1"},
        {**env, "runner_name": "someone-else"},
    ):
        assert env_digest(changed) != d
    assert env_digest({}) == env_digest({})


def _fake_tool(bindir: Path, name: str, body: str) -> None:
    bindir.mkdir(exist_ok=True)
    exe = bindir / name
    exe.write_text(f"#!/bin/sh\n{body}\n")
    exe.chmod(0o755)


def test_driver_from_smi_binary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert envinfo._driver() is None
    _fake_tool(tmp_path / "bin", "nvidia-smi", 'echo "NVIDIA H100, 550.54.15"')
    assert envinfo._driver() == {
        "tool": "nvidia-smi",
        "output": "NVIDIA H100, 550.54.15",
        "reason": None,
    }


def test_driver_query_times_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_tool(tmp_path / "bin", "rocm-smi", "exec sleep 5")
    monkeypatch.setenv("PATH", str(tmp_path / "bin") + os.pathsep + "/usr/bin:/bin")
    monkeypatch.setattr(envinfo, "_DRIVER_TIMEOUT_S", 0.3)
    drv = envinfo._driver()  # the fake tool sleeps 5 s: only the timeout can end this early
    assert drv is not None and drv["tool"] == "rocm-smi" and drv["output"] is None
    assert "timed out" in drv["reason"]
