"""Isolation between the cases that share one worker: what a case changes in its process is put
back before the next case, or the case fails naming it and the worker is replaced.

The end-to-end tests run a mutating case and then an observing case in ONE worker (same code
root, same platform, not fresh_process), through ``harness run`` and through ``pytest
harness/``; the in-process tests drive :func:`harness.worker.isolation.isolated` directly.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from corecases import run_plugin, write_cases
from isocases import ISOBULKY, ISOMOD, alive

import harness
from harness.cases import load_suite
from harness.cases.plan import build_plan
from harness.execution.run import Runner, RunOptions
from harness.platforms.profile import Profile, RetryPolicy

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[2]
PKG = str(Path(harness.__file__).resolve().parent)


# name, mutating target, observing target, mutating case's status, what its message or its
# "harness.restored" note names
PAIRS: list[tuple[str, str, str, str, str]] = [
    ("env", "env_set", "env_observe", "passed", "os.environ (HARNESS_LEAK)"),
    ("path", "path_insert", "path_observe", "passed", "sys.path"),
    ("modules", "modules_replace", "modules_observe", "passed", "sys.modules (json)"),
    ("threads", "threads_set", "threads_observe", "passed", "torch.get_num_threads()"),
    ("dtype", "dtype_set", "dtype_observe", "passed", "torch.get_default_dtype()"),
    (
        "deterministic",
        "deterministic_set",
        "deterministic_observe",
        "passed",
        "torch.are_deterministic_algorithms_enabled()",
    ),
    ("grad", "grad_set", "grad_observe", "passed", "torch.is_grad_enabled()"),
    ("seterr", "seterr_set", "seterr_observe", "passed", "numpy.geterr()"),
    ("warnings", "warnings_set", "warnings_observe", "passed", "warnings filters"),
    ("recursion", "recursion_set", "recursion_observe", "passed", "sys.getrecursionlimit()"),
    ("sigusr1", "sigusr1_ignore", "sigusr1_observe", "passed", "the SIGUSR1 handler"),
    (
        "interrupts",
        "interrupt_handlers_set",
        "interrupt_handlers_observe",
        "passed",
        "the SIGINT handler",
    ),
    ("rng", "rng_consume", "rng_observe", "passed", ""),  # reseeded, never restored
    (
        "sdp",
        "sdp_off",
        "sdp_observe",
        "failed",
        "torch.backends.cuda.flash_sdp_enabled() changed from True to False",
    ),
    ("stdout", "close_stdout", "stdout_observe", "failed", "file descriptor 1 (stdout) was closed"),
    (
        "probe-thread",
        "probe_thread",
        "probe_observe",
        "failed",
        "thread 'probe-spammer' (isomod.probe_thread.<locals>.spam) is still running",
    ),
    ("sysexit", "sys_exit", "observe_pid", "error", "sys.exit(3)"),
    ("interrupt", "keyboard_interrupt", "observe_pid", "error", "KeyboardInterrupt: stop right"),
    ("fork", "fork_returns", "observe_pid", "passed", ""),
    # collected after the attempt, outside every attempt's timing, never restored or noted
    ("garbage", "cycles_leave", "cycles_observe", "passed", ""),
    # what finalizers change while that garbage is collected is put back like the rest
    (
        "finalizers",
        "finalizers_leave",
        "finalizers_observe",
        "passed",
        "os.environ (HARNESS_GC_LEAK)",
    ),
]
FAILING = {name for name, _, _, status, _ in PAIRS if status != "passed"}
REPLACED = {"sdp", "stdout", "probe-thread"}  # what cannot be undone: the worker is replaced


@pytest.fixture
def project(project: Path) -> Path:
    """The scratch project with the default preimport (numpy and torch): these cases change
    torch's settings, which a worker puts back where it had imported torch before the
    attempt (without it, see the test after this fixture)."""
    (project / "runners" / "cpu.toml").unlink()
    return project


@pytest.mark.slow
def test_a_worker_without_torch_is_replaced_after_a_case_imports_it(tmp_path: Path) -> None:
    """``preimport = []``: a case that imports torch and sets float64 passes; torch's settings
    were never snapshotted, so the next case gets a fresh worker and sees float32."""
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "isomod.py").write_text(ISOMOD)
    (tmp_path / "cases").mkdir()
    (tmp_path / "runners").mkdir()
    (tmp_path / "runners" / "cpu.toml").write_text('name = "cpu"\npreimport = []\n')
    write_cases(
        tmp_path,
        "pair.toml",
        '[[case]]\nid = "a-set"\nkind = "loader"\ntarget = "isomod:dtype_set"\n'
        '[[case]]\nid = "b-observe"\nkind = "loader"\ntarget = "isomod:dtype_observe"\n',
    )
    proc = harness_run(tmp_path, "--run-id", "pre")
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads((tmp_path / "reports" / "pre" / "report.json").read_text())
    a, b = doc["cases"]
    assert a["status"] == "passed" and b["status"] == "passed", (a["attempts"], b["attempts"])
    assert "torch's settings cannot be put back" in a["attempts"][0]["notes"]["harness.isolation"]
    assert a["attempts"][0]["worker_pid"] != b["attempts"][0]["worker_pid"]
    assert "replaced before the next case" in proc.stderr


def harness_run(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``harness run cases --code-root code ...`` in ``project``, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", "cases", "--code-root", "code", *args],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def pair_cases(project: Path) -> None:
    (project / "code" / "isomod.py").write_text(ISOMOD)
    body = []
    for i, (name, mutate, observe, _, _) in enumerate(PAIRS):
        params = f'params = {{ pidfile = "{project / "fork.pid"}" }}\n' if name == "fork" else ""
        for tag, target in (("a", mutate), ("b", observe)):
            body.append(
                f'[[case]]\nid = "{i:02d}-{name}-{tag}"\nkind = "loader"\n'
                f'target = "isomod:{target}"\nretries = 0\n' + (params if tag == "a" else "")
            )
    write_cases(project, "pairs.toml", "\n".join(body))


def check_pairs(doc: dict[str, Any], project: Path) -> None:
    cases = {c["id"]: c for c in doc["cases"]}
    assert len(cases) == 2 * len(PAIRS), sorted(cases)
    for i, (name, _, _, status, names) in enumerate(PAIRS):
        mutate, observe = cases[f"{i:02d}-{name}-a"], cases[f"{i:02d}-{name}-b"]
        (m,) = mutate["attempts"]
        (o,) = observe["attempts"]
        assert observe["status"] == "passed", (name, o["error"])
        assert mutate["status"] == status, (name, m["error"])
        if status == "passed":
            assert names in m["notes"].get("harness.restored", ""), (name, m["notes"])
        else:
            assert names in m["error"]["message"], (name, m["error"])
        if name in REPLACED:
            assert "cannot be undone" in m["error"]["message"], (name, m["error"])
            assert names in m["notes"]["harness.isolation"]
            assert o["worker_pid"] != m["worker_pid"], f"{name}: worker not replaced"
        else:  # restored: the observing case ran in the very worker the mutating one changed
            assert o["worker_pid"] == m["worker_pid"], f"{name}: worker replaced"
    for name in ("sysexit", "interrupt"):
        i = [p[0] for p in PAIRS].index(name)
        err = cases[f"{i:02d}-{name}-a"]["attempts"][0]["error"]
        assert err["type"] == {"sysexit": "SystemExit", "interrupt": "KeyboardInterrupt"}[name]
        assert "worker exited" not in err["message"]
    # The forked child never answered for anyone: every attempt is the worker's own.
    child = int((project / "fork.pid").read_text())
    i = [p[0] for p in PAIRS].index("fork")
    observed = cases[f"{i:02d}-fork-b"]["attempts"][0]
    assert observed["notes"]["pid"] == observed["worker_pid"] != child
    assert all(a["worker_pid"] != child for c in doc["cases"] for a in c["attempts"])
    assert [a["index"] for c in doc["cases"] for a in c["attempts"]] == [0] * len(cases)


@pytest.mark.slow
def test_mutations_do_not_reach_the_next_case_through_harness_run(project: Path) -> None:
    pair_cases(project)
    proc = harness_run(project, "--run-id", "iso")
    assert proc.returncode == 1, proc.stderr[-3000:]
    stdout = [p[0] for p in PAIRS].index("stdout")
    assert f"loader/{stdout:02d}-stdout-a[cpu]: worker " in proc.stderr
    assert "replaced before the next case: file descriptor 1 (stdout) was closed" in proc.stderr
    check_pairs(json.loads((project / "reports" / "iso" / "report.json").read_text()), project)


@pytest.mark.slow
def test_mutations_do_not_reach_the_next_case_through_the_pytest_plugin(
    pytester: pytest.Pytester,
) -> None:
    project = pytester.path
    (project / "code").mkdir()
    (project / "cases").mkdir()
    pytester.makeini("[pytest]\n")
    pair_cases(project)
    result = run_plugin(pytester, "-v")
    result.assert_outcomes(passed=2 * len(PAIRS) - len(FAILING), failed=len(FAILING))
    for i, (name, *_rest) in enumerate(PAIRS):
        verdict = "FAILED" if name in FAILING else "PASSED"
        result.stdout.fnmatch_lines([f"*loader/{i:02d}-{name}-a[[]cpu[]] {verdict}*"])
        result.stdout.fnmatch_lines([f"*loader/{i:02d}-{name}-b[[]cpu[]] PASSED*"])
    (run,) = [d for d in (project / "reports").iterdir() if d.is_dir() and not d.is_symlink()]
    check_pairs(json.loads((run / "report.json").read_text()), project)


@pytest.mark.slow
def test_bundled_t2va_int8_passes_after_a_case_that_sets_float64(project: Path) -> None:
    (project / "code" / "isomod.py").write_text(ISOMOD)
    write_cases(
        project,
        "a_float64.toml",
        'id = "a-float64"\nkind = "pipeline"\ntarget = "isomod:dtype_set"\n',
    )
    (project / "cases" / "b_t2va.toml").write_text((REPO / "cases/pipeline/t2va.toml").read_text())
    proc = harness_run(
        project,
        *("--code-root", str(REPO / "targets" / "tinyav")),
        *("--references", str(REPO / "references"), "--run-id", "t2va"),
        *("-k", "float64 or (t2va-int8 and not pruned)", "-q"),
    )
    doc = json.loads((project / "reports" / "t2va" / "report.json").read_text())
    cases = {c["id"]: c for c in doc["cases"]}
    assert list(cases) == ["a-float64", "t2va-int8"]
    t2va = cases["t2va-int8"]
    assert t2va["status"] == "passed", [a["error"] for a in t2va["attempts"]]
    assert proc.returncode == 0, proc.stderr[-3000:]
    pids = {a["worker_pid"] for c in doc["cases"] for a in c["attempts"]}
    assert len(pids) == 1  # one worker: the dtype was put back, not a fresh process


def _kill_if_alive(pids: list[int]) -> None:
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
def test_child_processes_and_daemons_a_case_leaves_are_killed_and_reported(
    project: Path, request: pytest.FixtureRequest
) -> None:
    (project / "code" / "isomod.py").write_text(ISOMOD)
    pidfile = project / "left.pid"
    write_cases(
        project,
        "daemons.toml",
        f"""
        [[case]]
        id = "a-daemons"
        kind = "loader"
        target = "isomod:leave_daemons"
        params = {{ pidfile = "{pidfile}" }}
        retries = 0

        [[case]]
        id = "b-next"
        kind = "loader"
        target = "isomod:observe_pid"
        """,
    )
    runner = Runner(
        RunOptions(
            profile=Profile(retry=RetryPolicy(retries=0)),
            out_root=project / "reports",
            code_roots=(str(project / "code"),),
            cwd=str(project),
        )
    )
    left: list[int] = []
    request.addfinalizer(lambda: _kill_if_alive(left))
    try:
        runner.run_plan(build_plan(load_suite([project / "cases"]).cases, ["cpu"]))
    finally:
        report = runner.finish()
        left += [int(pidfile.read_text()), int(Path(f"{pidfile}.daemon").read_text())]
    sleeper, daemon = left
    cases = {c.id: c for c in report.cases}
    bad = cases["a-daemons"]
    assert bad.status == "failed"
    message = bad.attempts[0].error.message
    assert f"child process {sleeper} (sleep 300) was still running; it was killed" in message
    # The double-forked daemon (setsid, parent gone) was reparented to the worker and found.
    assert f"child process {daemon} (" in message and "-c" in message
    assert not alive(sleeper) and not alive(daemon)
    nxt = cases["b-next"]
    assert nxt.status == "passed"
    assert nxt.attempts[0].worker_pid != bad.attempts[0].worker_pid


@pytest.mark.slow
def test_the_worker_freezes_its_heap_before_the_first_attempt(project: Path) -> None:
    (project / "code" / "isomod.py").write_text(ISOMOD)
    write_cases(
        project, "gc.toml", 'id = "frozen"\nkind = "loader"\ntarget = "isomod:frozen_heap"\n'
    )
    proc = harness_run(project, "--run-id", "gc", "-q")
    doc = json.loads((project / "reports" / "gc" / "report.json").read_text())
    (case,) = doc["cases"]
    assert case["status"] == "passed", case["attempts"][0]["error"]
    assert proc.returncode == 0


@pytest.mark.slow
def test_what_an_attempt_imported_is_frozen_for_the_attempts_after_it(project: Path) -> None:
    # A stack imported by a target's first attempt (diffusers: ~260,000 objects) is frozen
    # after it, like the start-up heap: the collection after every later attempt, and any
    # inside one, then walks that attempt's own objects only.
    (project / "code" / "isomod.py").write_text(ISOMOD)
    (project / "code" / "isobulky.py").write_text(ISOBULKY)
    write_cases(
        project,
        "bulky.toml",
        # The first attempt of a run is followed by the environment probe, which freezes
        # anyway: the importing case comes second, as a stack's first case often does.
        '[[case]]\nid = "bulky-0"\nkind = "loader"\ntarget = "isomod:env_observe"\n'
        '[[case]]\nid = "bulky-a"\nkind = "loader"\ntarget = "isomod:import_bulky"\n'
        '[[case]]\nid = "bulky-b"\nkind = "loader"\ntarget = "isomod:bulky_frozen"\n',
    )
    proc = harness_run(project, "--run-id", "bulky", "-q")
    doc = json.loads((project / "reports" / "bulky" / "report.json").read_text())
    cases = {c["id"]: c for c in doc["cases"]}
    (first,), (a,), (b,) = (cases[f"bulky-{k}"]["attempts"] for k in "0ab")
    assert first["worker_pid"] == a["worker_pid"] == b["worker_pid"]
    assert cases["bulky-b"]["status"] == "passed", b["error"]
    assert proc.returncode == 0, proc.stderr


@pytest.mark.slow
def test_the_snapshots_tables_are_frozen_with_the_heap(project: Path) -> None:
    # The tables an attempt's snapshot copies (sys.modules, the watched modules' namespaces,
    # the loggers' states) outlive the attempt and serve the next ones: frozen with the heap
    # after the environment probe, and after an attempt that made new ones, the collection
    # after each attempt does not walk them (a trivial attempt's 160-220 us of it, 20-25 after).
    (project / "code" / "isomod.py").write_text(ISOMOD)
    write_cases(
        project,
        "tables.toml",
        # the first attempt of a run is followed by the environment probe (new tables after)
        '[[case]]\nid = "tables-0"\nkind = "loader"\ntarget = "isomod:env_observe"\n'
        '[[case]]\nid = "tables-a"\nkind = "loader"\ntarget = "isomod:tables_frozen"\n'
        '[[case]]\nid = "tables-b"\nkind = "loader"\ntarget = "isomod:logger_made"\n'
        '[[case]]\nid = "tables-c"\nkind = "loader"\ntarget = "isomod:tables_frozen"\n',
    )
    proc = harness_run(project, "--run-id", "tables", "-q")
    doc = json.loads((project / "reports" / "tables" / "report.json").read_text())
    cases = {c["id"]: c for c in doc["cases"]}
    pids = {c["attempts"][0]["worker_pid"] for c in cases.values()}
    assert len(pids) == 1, pids
    for name in ("tables-a", "tables-c"):
        assert cases[name]["status"] == "passed", cases[name]["attempts"][0]["error"]
    assert proc.returncode == 0, proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("coverage", [False, True], ids=["timed", "coverage"])
def test_cycles_an_attempt_kept_alive_are_freed_once_a_later_one_drops_them(
    project: Path, coverage: bool
) -> None:
    # What a plain attempt leaves alive is not frozen with the snapshot's tables: cycles it
    # kept are freed by the collection after the attempt that drops them. A coverage attempt
    # reads its snapshot afresh (new tables each time) and is not frozen for them either.
    (project / "code" / "isomod.py").write_text(ISOMOD)
    write_cases(
        project,
        "kept.toml",
        '[[case]]\nid = "kept-0"\nkind = "loader"\ntarget = "isomod:env_observe"\n'
        '[[case]]\nid = "kept-a"\nkind = "loader"\ntarget = "isomod:cycles_keep"\n'
        '[[case]]\nid = "kept-b"\nkind = "loader"\ntarget = "isomod:cycles_drop"\n'
        '[[case]]\nid = "kept-c"\nkind = "loader"\ntarget = "isomod:cycles_observe"\n',
    )
    extra = ("--coverage",) if coverage else ()
    proc = harness_run(project, "--run-id", "kept", "-q", *extra)
    doc = json.loads((project / "reports" / "kept" / "report.json").read_text())
    cases = {c["id"]: c for c in doc["cases"]}
    assert len({a["worker_pid"] for c in cases.values() for a in c["attempts"]}) == 1
    assert cases["kept-c"]["status"] == "passed", cases["kept-c"]["attempts"][0]["error"]
    assert proc.returncode == 0, proc.stderr


MANAGER = """
import sys
from pathlib import Path
from harness.cases import build_plan, load_suite
from harness.execution.run import Runner, RunOptions

root = Path(sys.argv[1])
runner = Runner(RunOptions(out_root=root / "reports", code_roots=(str(root / "code"),),
                           cwd=str(root)))
runner.run_plan(build_plan(load_suite([root / "cases"]).cases, ["cpu"]))
"""


@pytest.mark.slow
def test_workers_die_with_their_manager(project: Path, request: pytest.FixtureRequest) -> None:
    (project / "code" / "isomod.py").write_text(ISOMOD)
    pidfile = project / "worker.pid"
    write_cases(
        project,
        "hang.toml",
        f"""
        id = "hang"
        kind = "loader"
        target = "isomod:hang_with_pid"
        params = {{ pidfile = "{pidfile}" }}
        timeout_s = 600
        """,
    )
    (project / "manager.py").write_text(MANAGER)
    manager = subprocess.Popen([sys.executable, str(project / "manager.py"), str(project)])
    worker: list[int] = []
    request.addfinalizer(lambda: _kill_if_alive(worker))
    request.addfinalizer(lambda: _kill_if_alive([manager.pid]))
    deadline = time.monotonic() + 180
    while not pidfile.exists() or not pidfile.read_text():
        assert manager.poll() is None, "the manager exited before its worker started the case"
        assert time.monotonic() < deadline, "the worker never started the case"
        time.sleep(0.1)
    worker.append(int(pidfile.read_text()))
    assert alive(worker[0])
    os.kill(manager.pid, signal.SIGKILL)
    manager.wait()
    deadline = time.monotonic() + 60  # a generous bound on a wait, not a speed claim
    while alive(worker[0]):
        assert time.monotonic() < deadline, f"worker {worker[0]} outlived its SIGKILLed manager"
        time.sleep(0.1)


# -- in-process: the snapshot and restore themselves ---------------------------------------
