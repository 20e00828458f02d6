"""Workers forked from the zygote (harness/worker/zygote.py) are the workers a plain spawn would
have started: same environment, import path, working folder, flags, modules, session and
signals; a code root that would shadow what the zygote preloaded gets a plain spawn; a private
zygote does not outlive the run, a shared one (HARNESS_ZYGOTE_DIR) serves the next run, kills
the workers of a run that died, exits when idle, and stops listening when it cannot accept.
Real `harness run` processes throughout."""

from __future__ import annotations

import json
import os
import resource
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from corecases import workers_alive, write_toy_runner

from harness.execution.pool import WorkerPool, WorkerSpec
from harness.execution.zygote import ForkedProcess
from harness.execution.zygote_service import SHARED_ENV, source_digest, stop_shared
from harness.worker.zygote import addressed, shadowed

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

def hang():
    with open(os.environ["ENVDUMP"] + ".pid", "w") as f:
        f.write(str(os.getpid()))
    import time
    time.sleep(300)
"""

CLI = (sys.executable, "-m", "harness.cli")
OPTS = ("--code-root", "code", "--out", "runs", "-q")
CASE = """
[[case]]
id = "env"
kind = "loader"
target = "envcase:dump"

[[case]]
id = "hang"
kind = "loader"
target = "envcase:hang"
"""


def _project(root: Path, *, torch: bool = False) -> Path:
    """The env and hang cases, which use no torch. ``torch``: the default profile (its workers
    and zygote import numpy and torch first, as a stack's do); else a profile whose workers
    import neither (``preimport = []``): the zygote's life (shared, idle, killed, refused) is
    the same, without ~1 s of CPU per zygote."""
    (root / "code").mkdir(parents=True)
    (root / "code" / "envcase.py").write_text(DUMP)
    (root / "cases").mkdir()
    (root / "cases" / "env.toml").write_text(CASE)
    if not torch:
        write_toy_runner(root)
    return root


def _env(fork: str, shared: Path | None, **extra: str) -> dict[str, str]:
    env = {**os.environ, "HARNESS_FORK_WORKERS": fork, **extra}
    env.pop(SHARED_ENV, None)
    if shared is not None:
        env[SHARED_ENV] = str(shared)
    return env


def _run(
    root: Path, fork: str, name: str, shared: Path | None = None, **extra: str
) -> tuple[dict[str, Any], str]:
    out = Path(extra.setdefault("ENVDUMP", str(root / f"{name}.json")))
    proc = subprocess.run(
        [*CLI, "run", "cases", "-k", "env", *OPTS, "--run-id", name],
        cwd=root,
        env=_env(fork, shared, **extra),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    log = "".join(p.read_text() for p in (root / "runs" / name / "workers").glob("head-*.log"))
    return json.loads(out.read_text()), log


def _forked_from(log: str) -> int:
    """The pid of the zygote the run's worker was forked from, by its log."""
    (line,) = [x for x in log.splitlines() if " forked from " in x]
    return int(line.rsplit(" ", 1)[1])


def _gone(pid: int, timeout: float = 30.0) -> bool:
    """Whether process ``pid`` is gone (or a zombie) within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state == "Z":
            return True
        time.sleep(0.1)
    return False


@pytest.mark.slow
def test_a_forked_worker_is_the_worker_a_plain_spawn_starts(tmp_path: Path) -> None:
    # with torch preimported: what its import does to a process (threads, signals, modules,
    # descriptors) is part of what the fork must reproduce. One plain spawn, against a worker
    # forked from a private zygote and one from a shared zygote (HARNESS_ZYGOTE_DIR).
    root = _project(tmp_path, torch=True)
    folder = tmp_path / "zygotes"
    spawned, spawned_log = _run(root, "0", "spawned")
    private, private_log = _run(root, "1", "private", HARNESS_ZYGOTE_IDLE="3")
    shared, shared_log = _run(root, "1", "shared", folder, HARNESS_ZYGOTE_IDLE="3")
    assert "spawned, not forked: HARNESS_FORK_WORKERS is off" in spawned_log
    # what differs between any two runs, forked or not
    for facts in (spawned, private, shared):
        for key in ("ENVDUMP", "HARNESS_FORK_WORKERS", "HARNESS_MANAGER_PID"):
            facts["environ"].pop(key)
    # the one variable the shared zygote's run had that the others did not: passed on as is
    assert shared["environ"].pop(SHARED_ENV) == str(folder)
    for forked, log, is_shared in ((private, private_log, False), (shared, shared_log, True)):
        assert "spawned, not forked" not in log, log
        assert (" forked from shared zygote " in log) is is_shared, log
        forked["environ"].pop("HARNESS_ZYGOTE_IDLE")
        for key in spawned:
            if key != "ppid":
                assert forked[key] == spawned[key], key
        assert forked["ppid"] == _forked_from(log)
    # the private zygote is gone with its run
    assert not Path(f"/proc/{private['ppid']}").exists()
    # a shared zygote outlives the run, then exits once idle, and takes its socket
    assert _gone(shared["ppid"]), f"the shared zygote {shared['ppid']} is still there"
    assert not list(folder.glob("*.sock"))


@pytest.mark.slow
def test_runs_share_a_zygote_that_kills_the_workers_of_a_run_that_died(tmp_path: Path) -> None:
    root = _project(tmp_path)
    folder = tmp_path / "zygotes"
    dump = str(root / "facts.json")  # one environment for every run: one zygote
    first = _forked_from(_run(root, "1", "first", folder, ENVDUMP=dump)[1])
    assert _forked_from(_run(root, "1", "second", folder, ENVDUMP=dump)[1]) == first
    # a run killed (SIGKILL: no clean-up of its own) while its worker runs a case
    pidfile = Path(dump + ".pid")
    proc = subprocess.Popen(
        [*CLI, "run", "cases", "-k", "hang", *OPTS, "--run-id", "killed"],
        cwd=root,
        env=_env("1", folder, ENVDUMP=dump),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while not pidfile.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        worker = int(pidfile.read_text())
        assert Path(f"/proc/{worker}/stat").read_text().rsplit(")", 1)[1].split()[1] == str(first)
        proc.kill()
        proc.wait(timeout=30)
        assert _gone(worker), f"worker {worker} outlived its run"
        # the zygote serves on; killed, the next run starts another over its stale socket
        assert not _gone(first, timeout=0.5)
        os.kill(first, signal.SIGKILL)
        assert _gone(first)
        assert _forked_from(_run(root, "1", "third", folder, ENVDUMP=dump)[1]) != first
    finally:
        proc.kill()
        stop_shared(folder)


@pytest.mark.slow
def test_the_runs_of_two_xdist_workers_share_a_zygote_and_each_worker_has_its_own_name(
    tmp_path: Path,
) -> None:
    """pytest-xdist names each of its workers in the environment (``PYTEST_XDIST_WORKER``):
    `pytest harness/ -n 2` with shared zygotes starts one zygote (which imports the profile's
    preimports, torch by default), not one per xdist worker, and each harness worker still
    sees the name of the xdist worker that asked for it. So do two steps of one GitHub Actions
    job, each with a job summary file of its own (``GITHUB_STEP_SUMMARY``)."""
    root = _project(tmp_path)
    folder = tmp_path / "zygotes"
    dump = str(root / "facts.json")
    try:
        seen = {}
        for name in ("gw0", "gw1"):
            facts, log = _run(
                root,
                "1",
                name,
                folder,
                ENVDUMP=dump,
                PYTEST_XDIST_WORKER=name,
                PYTEST_XDIST_TESTRUNUID=f"run-{name}",
                GITHUB_ACTIONS="true",
                GITHUB_STEP_SUMMARY=str(root / f"summary-{name}.md"),
            )
            seen[name] = (_forked_from(log), facts["environ"])
        assert seen["gw0"][0] == seen["gw1"][0], "two zygotes for one environment"
        for name, (_, environ) in seen.items():
            assert environ["PYTEST_XDIST_WORKER"] == name
            assert environ["PYTEST_XDIST_TESTRUNUID"] == f"run-{name}"
            assert environ["GITHUB_STEP_SUMMARY"] == str(root / f"summary-{name}.md")
            assert environ["GITHUB_ACTIONS"] == "true"
    finally:
        stop_shared(folder)


@pytest.mark.slow
def test_a_shared_zygote_that_cannot_accept_removes_its_socket_rather_than_spin(
    tmp_path: Path,
) -> None:
    """Out of descriptors (its limit lowered from outside, as a full table would), ``accept``
    fails while the listener stays readable: the zygote closes the listener (the manager
    waiting in its queue is told at once) and removes its socket, so the next run starts
    another zygote, instead of looping on the failed accept until its idle time is up."""
    root = _project(tmp_path)
    folder = tmp_path / "zygotes"
    same = {"ENVDUMP": str(root / "facts.json"), "HARNESS_ZYGOTE_IDLE": "600"}
    first = _forked_from(_run(root, "1", "first", folder, **same)[1])
    try:
        (at,) = folder.glob("*.sock")
        fds = {int(fd) for fd in os.listdir(f"/proc/{first}/fd")}
        lowest_free = min(set(range(len(fds) + 1)) - fds)
        hard = resource.prlimit(first, resource.RLIMIT_NOFILE)[1]
        resource.prlimit(first, resource.RLIMIT_NOFILE, (lowest_free, hard))
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as sock:
            with addressed(str(at)) as address:
                sock.connect(address)  # queued: the zygote's accept is what fails
            sock.settimeout(30)
            try:
                said = sock.recv(64)
            except ConnectionResetError:
                said = b""
        assert said == b"", f"the zygote said {said!r} out of descriptors"
        assert not at.exists()
        assert _gone(first, timeout=10), "a zygote with no manager and no socket stays"
        assert _forked_from(_run(root, "1", "second", folder, **same)[1]) != first
    finally:
        stop_shared(folder)


def test_a_changed_source_file_gives_another_digest(tmp_path: Path) -> None:
    # a shared zygote's socket is named by the digest of the harness source and of the files
    # of what it imports: one that loaded other versions serves nobody with these
    files = [tmp_path / "a.py", tmp_path / "b.py"]
    for f in files:
        f.write_text("x = 1\n")
    before = source_digest(files)
    assert source_digest(files) == before
    st = files[1].stat()
    os.utime(files[1], ns=(st.st_atime_ns, st.st_mtime_ns + 1000))
    touched = source_digest(files)
    files[0].write_text("x = 2\n")
    assert len({before, touched, source_digest(files)}) == 3


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
        handle = pool.get(WorkerSpec("cpu", preimport=()))
        assert isinstance(handle.proc, ForkedProcess)
        alive = workers_alive(tmp_path / "workers")
        assert [line.split(":")[0] for line in alive] == [str(handle.pid)], alive
    finally:
        pool.close()
    assert handle.proc.returncode == -signal.SIGKILL
    assert not workers_alive(tmp_path / "workers")
