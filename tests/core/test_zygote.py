"""Workers forked from the zygote (harness/worker/zygote.py) are the workers a plain spawn would
have started: same environment, import path, working folder, flags, modules, session and
signals; a code root that would shadow what the zygote preloaded gets a plain spawn; and the
zygote does not outlive the run. Real `harness run` processes throughout."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from corecases import workers_alive

from harness.execution.pool import WorkerPool, WorkerSpec
from harness.execution.zygote import ForkedProcess
from harness.worker.zygote import shadowed

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

DUMP = """
import json, os, resource, signal, sys

def _links():
    for fd in os.listdir("/proc/self/fd"):
        try:
            yield os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the listing's own
            pass

def dump():
    facts = {
        "environ": dict(os.environ),
        "path": sys.path,
        "cwd": os.getcwd(),
        "argv0": sys.argv[0],
        "flags": str(sys.flags),
        "own_session": os.getsid(0) == os.getpid() == os.getpgrp(),
        "modules": sorted(sys.modules),
        # (not the harness's per-thread /proc readers: a fork stops OpenBLAS's thread pool,
        # which starts again on its first use)
        "fds": sorted(
            link.split("[")[0].split("/runs/")[0]
            for link in _links()
            if not link.startswith("/proc/")
        ),
        "signals": {s: str(signal.getsignal(s)) for s in range(1, 32) if s not in (9, 19)},
        "mask": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
        "umask": [l for l in open("/proc/self/status") if l.startswith("Umask")],
        "nice": os.getpriority(os.PRIO_PROCESS, 0),
        "affinity": sorted(os.sched_getaffinity(0)),
        "limits": [
            resource.getrlimit(getattr(resource, n)) for n in dir(resource) if "RLIMIT_" in n
        ],
        "ppid": os.getppid(),
        "site_ran": os.environ.get("SITE_RAN"),
    }
    with open(os.environ["ENVDUMP"], "w") as f:
        json.dump(facts, f)
"""

CLI = (sys.executable, "-m", "harness.cli")
CASE = """
[[case]]
id = "env"
kind = "loader"
target = "envcase:dump"
"""


def _project(root: Path) -> Path:
    (root / "code").mkdir(parents=True)
    (root / "code" / "envcase.py").write_text(DUMP)
    (root / "cases").mkdir()
    (root / "cases" / "env.toml").write_text(CASE)
    return root


def _run(root: Path, fork: str, name: str) -> tuple[dict[str, Any], str]:
    out = root / f"{name}.json"
    env = {**os.environ, "ENVDUMP": str(out), "HARNESS_FORK_WORKERS": fork}
    proc = subprocess.run(
        [*CLI, "run", "cases", "--code-root", "code", "--out", "runs", "--run-id", name, "-q"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    log = "".join(p.read_text() for p in (root / "runs" / name / "workers").glob("head-*.log"))
    return json.loads(out.read_text()), log


@pytest.mark.slow
def test_a_forked_worker_is_the_worker_a_plain_spawn_starts(tmp_path: Path) -> None:
    root = _project(tmp_path)
    spawned, spawned_log = _run(root, "0", "spawned")
    forked, forked_log = _run(root, "1", "forked")
    assert "spawned, not forked: HARNESS_FORK_WORKERS is off" in spawned_log
    assert "spawned, not forked" not in forked_log, forked_log
    # what differs between any two runs, forked or not
    for facts in (spawned, forked):
        for key in ("ENVDUMP", "HARNESS_FORK_WORKERS", "HARNESS_MANAGER_PID"):
            facts["environ"].pop(key)
    for key in spawned:
        if key != "ppid":
            assert forked[key] == spawned[key], key
    # the forked worker's parent was the zygote, and it is gone with the run
    assert not Path(f"/proc/{forked['ppid']}").exists()


def test_a_module_in_a_code_root_that_the_zygote_loaded_from_elsewhere_is_shadowing(
    tmp_path: Path,
) -> None:
    harmless = tmp_path / "harmless"
    (harmless / "harness.egg-info").mkdir(parents=True)
    (harmless / "tests").mkdir()
    (harmless / "json.txt").write_text("")
    (harmless / "mymodule.py").write_text("")
    assert shadowed([str(harmless)]) is None
    # the harness package itself, reached through another path to the same folder
    same = tmp_path / "same"
    same.mkdir()
    (same / "harness").symlink_to(Path(sys.modules["harness"].__file__ or "").parent)
    assert shadowed([str(same)]) is None
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "json.py").write_text("")
    why = shadowed([str(harmless), str(shadow)])
    assert why is not None and f"{shadow / 'json.py'} shadows json" in why


@pytest.mark.slow
def test_a_code_root_with_a_sitecustomize_gets_a_plain_spawn_that_runs_it(tmp_path: Path) -> None:
    root = _project(tmp_path)
    (root / "code" / "sitecustomize.py").write_text("import os\nos.environ['SITE_RAN'] = '1'\n")
    facts, log = _run(root, "1", "site")
    assert "the zygote refused" in log and "sitecustomize.py" in log, log
    assert facts["site_ran"] == "1"


@pytest.mark.slow
def test_a_forked_worker_is_found_alive_by_the_files_it_holds_and_gone_after_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # tests/core/corecases.workers_alive is how the interrupt tests prove no worker is left:
    # it must see a forked worker, whose command line is the zygote's
    monkeypatch.setenv("HARNESS_FORK_WORKERS", "1")
    pool = WorkerPool(tmp_path / "workers")
    try:
        handle = pool.get(WorkerSpec("cpu"))
        assert isinstance(handle.proc, ForkedProcess)
        alive = workers_alive(tmp_path / "workers")
        assert [line.split(":")[0] for line in alive] == [str(handle.pid)], alive
    finally:
        pool.close()
    assert handle.proc.returncode == -signal.SIGKILL
    assert not workers_alive(tmp_path / "workers")
