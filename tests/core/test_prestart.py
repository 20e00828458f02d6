"""The zygote started before the cases load (``harness.execution.run.prestart``, which `harness
run` calls before it loads its case files): the run's first worker is forked from it, not from a
second one; one started for nothing is killed at exit, not waited for while it imports torch;
none is started where zygotes are shared or forking is off. Real zygotes and workers."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from corecases import write_cases

from harness.cases import load_suite
from harness.cases.plan import build_plan
from harness.execution import zygote
from harness.execution.run import Runner, RunOptions, prestart
from harness.execution.zygote_service import SHARED_ENV

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forks zygotes")

TWO = """
[[case]]
id = "a"
kind = "loader"
target = "tmod:ok"

[[case]]
id = "b"
kind = "loader"
target = "tmod:ok"
"""


@pytest.fixture
def private(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Private zygotes in this process (the session shares its zygotes: tests/conftest.py),
    all stopped afterwards."""
    monkeypatch.delenv(SHARED_ENV, raising=False)
    monkeypatch.delenv("HARNESS_FORK_WORKERS", raising=False)
    # what earlier tests in this process left: a comparison's renew() (private zygotes only,
    # none shared), zygotes that did not start
    monkeypatch.setattr(zygote, "_private_only", False)
    monkeypatch.setattr(zygote, "_broken", set())
    zygote.close_all()
    yield
    zygote.close_all()


def starting() -> list[zygote.Zygote]:
    return [z for key, z in zygote._zygotes.items() if key in zygote._starting]


def options_of(project: Path) -> RunOptions:
    return RunOptions(
        out_root=project / "reports", code_roots=(str(project / "code"),), cwd=str(project)
    )


def test_the_first_worker_is_forked_from_the_zygote_started_before_the_cases_loaded(
    project: Path, private: None
) -> None:
    options = options_of(project)
    assert prestart(options, "cpu")
    (early,) = starting()
    assert not prestart(options, "cpu")  # started already: not a second one
    write_cases(project, "two.toml", TWO)
    suite = load_suite([project / "cases"])
    runner = Runner(options)
    runner.run_plan(build_plan(suite.cases, ["cpu"]))
    report = runner.finish()
    assert [c.status for c in report.cases] == ["passed", "passed"]
    assert starting() == [] and list(zygote._zygotes.values()) == [early]
    logs = "".join(p.read_text() for p in (runner.run_dir / "workers").glob("head-*.log"))
    assert f"forked from zygote {early.pid}" in logs, logs


def test_a_zygote_started_for_nothing_is_killed_at_exit(tmp_path: Path, private: None) -> None:
    assert prestart(RunOptions(code_roots=(str(tmp_path),), cwd=str(tmp_path)), "cpu")
    (early,) = starting()
    assert early.proc is not None
    zygote.close_all()
    # killed, not let go to finish importing torch and exit by itself
    assert early.proc.poll() == -signal.SIGKILL
    assert zygote._zygotes == {} and zygote._starting == {}
    # and its log, empty, is not left in the temporary folder
    assert not (Path(tempfile.gettempdir()) / f"harness-zygote-{os.getpid()}-prestart.log").exists()


@pytest.mark.parametrize("setting", ["shared", "fork off"])
def test_none_is_started_where_zygotes_are_shared_or_forking_is_off(
    tmp_path: Path, private: None, monkeypatch: pytest.MonkeyPatch, setting: str
) -> None:
    if setting == "shared":
        monkeypatch.setenv(SHARED_ENV, str(tmp_path / "zygotes"))
    else:
        monkeypatch.setenv("HARNESS_FORK_WORKERS", "0")
    assert not prestart(RunOptions(code_roots=(str(tmp_path),), cwd=str(tmp_path)), "cpu")
    assert zygote._zygotes == {}


def test_harness_run_forks_its_worker_from_the_zygote_it_started_first(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the CLI, with every interpreter printing its imports' times (so that a
    zygote's log is kept): the zygote that imported the worker's modules is the one started
    before the cases loaded, whose log is in the temporary folder; no other zygote was started
    for the run's worker (its log would be in the run's workers/ folder)."""
    monkeypatch.delenv(SHARED_ENV, raising=False)
    monkeypatch.setenv("PYTHONPROFILEIMPORTTIME", "1")
    write_cases(project, "two.toml", TWO)
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "run", "cases", "--code-root", "code", "-q"],
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _, err = proc.communicate(timeout=300)
    early = Path(tempfile.gettempdir()) / f"harness-zygote-{proc.pid}-prestart.log"
    try:
        assert proc.returncode == 0, err[-3000:]
        # that zygote imported what a worker imports before it is ready
        assert re.search(r"\| harness\.checks\.quality$", early.read_text(), re.M)
    finally:
        early.unlink(missing_ok=True)
    (run,) = [p for p in (project / "reports").iterdir() if p.name != "latest"]
    assert list((run / "workers").glob("zygote-*.log")) == []
    logs = [p.read_text() for p in (run / "workers").glob("head-*.log")]
    assert len(logs) == 1 and " forked from zygote " in logs[0], logs
