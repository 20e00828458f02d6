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
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
from corecases import write_cases

import harness
from harness.cases import load_suite
from harness.cases.plan import build_plan
from harness.execution.run import Runner, RunOptions
from harness.model import Attempt
from harness.platforms.profile import Profile, RetryPolicy
from harness.worker.isolation import Guard, isolated

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[2]
PKG = str(Path(harness.__file__).resolve().parent)

ISOMOD = '''
import os, signal, subprocess, sys, threading, time, warnings
from pathlib import Path
from harness import probe


def env_set():
    os.environ["HARNESS_LEAK"] = "1"
def env_observe():
    assert "HARNESS_LEAK" not in os.environ, "os.environ['HARNESS_LEAK'] leaked in"

def path_insert():
    sys.path.insert(0, "/leaked/path")
def path_observe():
    assert "/leaked/path" not in sys.path, "sys.path entry leaked in"

def modules_replace():
    import json
    sys.modules["json"] = object()
def modules_observe():
    import json
    assert hasattr(json, "dumps"), f"sys.modules['json'] is {json!r}"

def threads_set():
    import torch
    torch.set_num_threads(7)
def threads_observe():
    import torch
    assert torch.get_num_threads() != 7, "torch.set_num_threads(7) leaked in"

def dtype_set():
    import torch
    torch.set_default_dtype(torch.float64)
def dtype_observe():
    import torch
    assert torch.ones(2).dtype == torch.float32, torch.get_default_dtype()

def deterministic_set():
    import torch
    torch.use_deterministic_algorithms(True)
def deterministic_observe():
    import torch
    assert not torch.are_deterministic_algorithms_enabled(), "deterministic mode leaked in"

def grad_set():
    import torch
    torch.set_grad_enabled(False)
def grad_observe():
    import torch
    x = torch.ones(2, requires_grad=True)
    (x * 2).sum().backward()
    assert x.grad is not None

def seterr_set():
    import numpy as np
    np.seterr(all="raise")
def seterr_observe():
    import numpy as np
    np.log(np.zeros(1))  # FloatingPointError if np.seterr(all="raise") leaked in

def warnings_set():
    warnings.simplefilter("error")
def warnings_observe():
    warnings.warn("a harmless warning", UserWarning)

def recursion_set():
    sys.setrecursionlimit(200)
def recursion_observe():
    def down(n):
        return 0 if n == 0 else 1 + down(n - 1)
    assert down(500) == 500

def sdp_off():
    import torch
    torch.backends.cuda.enable_flash_sdp(False)  # a flag the harness reads but never writes
def sdp_observe():
    import torch
    assert torch.backends.cuda.flash_sdp_enabled(), "flash sdp switched off by a case before"

def close_stdout():
    os.close(1)
def stdout_observe():
    print("observing", flush=True)
    os.write(1, b"fd 1 still works\\n")

def sigusr1_ignore():
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
def sigusr1_observe():
    # The manager sends SIGUSR1 for a stack dump before it kills a hung worker.
    dump = Path(sys.argv[sys.argv.index("--stackdump") + 1])
    before = dump.stat().st_size
    signal.pthread_kill(threading.main_thread().ident, signal.SIGUSR1)
    assert dump.stat().st_size > before, "SIGUSR1 no longer dumps the stacks"

def interrupt_handlers_set():
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda *_: None)
def interrupt_handlers_observe():
    assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN, signal.getsignal(signal.SIGINT)
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL, signal.getsignal(signal.SIGTERM)

def probe_thread():
    import numpy as np
    def spam():
        while True:
            probe.output("leak", np.full(96, np.nan, dtype=np.float32), kind="audio")
            time.sleep(0.001)
    threading.Thread(target=spam, name="probe-spammer", daemon=True).start()
def probe_observe():
    import numpy as np
    time.sleep(0.3)
    probe.output("mine", np.ones(4, dtype=np.float32), kind="audio")

def rng_consume():
    import random
    import numpy as np
    import torch
    random.seed(999); np.random.seed(1); torch.manual_seed(5)
    random.random(); np.random.random_sample(3); torch.rand(3)
def rng_observe():
    # Every attempt starts from its own seed: what the case before drew or seeded is gone.
    import random
    import numpy as np
    import torch
    seed = probe.seed()
    assert random.random() == random.Random(seed).random()
    assert np.random.random_sample() == np.random.RandomState(seed % 2**32).random_sample()
    mine = torch.Generator().manual_seed(seed)
    assert torch.equal(torch.rand(2), torch.rand(2, generator=mine))

def sys_exit():
    sys.exit(3)
def keyboard_interrupt():
    raise KeyboardInterrupt("stop right here")

def fork_returns(pidfile):
    pid = os.fork()
    if pid == 0:
        Path(pidfile).write_text(str(os.getpid()))
        return  # the child returns from the target into the worker's loop
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    pid = os.fork()
    if pid == 0:
        sys.exit(3)  # a child that exits the Python way keeps its status
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 3

def observe_pid():
    probe.note("pid", os.getpid())

DAEMON = """
import os, sys, time
pid = os.fork()
if pid:
    os.waitpid(pid, 0)
    sys.exit(0)
os.setsid()
grandchild = os.fork()
if grandchild:
    open(sys.argv[1], "w").write(str(grandchild))
    os._exit(0)
time.sleep(300)
"""

def leave_daemons(pidfile):
    sleeper = subprocess.Popen(["sleep", "300"], start_new_session=True)  # setsid sleep 300
    subprocess.run([sys.executable, "-c", DAEMON, pidfile + ".daemon"], check=True)
    Path(pidfile).write_text(str(sleeper.pid))

def frozen_heap():
    import gc
    # What the worker imported before its first attempt (torch, numpy) is frozen: a full
    # collection inside an attempt never walks it, nor garbage that earlier cases left.
    assert gc.get_freeze_count() > 50_000, gc.get_freeze_count()

def hang_with_pid(pidfile):
    Path(pidfile).write_text(str(os.getpid()))
    time.sleep(600)
'''

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
]
FAILING = {name for name, _, _, status, _ in PAIRS if status != "passed"}
REPLACED = {"sdp", "stdout", "probe-thread"}  # what cannot be undone: the worker is replaced


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
    result = pytester.runpytest_subprocess(
        PKG,
        "--harness-cases",
        "cases",
        "--harness-code-root",
        "code",
        "--harness-out",
        "reports",
        "-p",
        "no:cacheprovider",
        f"--rootdir={project}",
        "-v",
    )
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


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie, dead but not reaped by its parent, is not alive)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X")


def _kill_if_alive(pids: list[int]) -> None:
    for pid in pids:
        if _alive(pid):
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
    assert not _alive(sleeper) and not _alive(daemon)
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
    assert _alive(worker[0])
    os.kill(manager.pid, signal.SIGKILL)
    manager.wait()
    deadline = time.monotonic() + 60  # a generous bound on a wait, not a speed claim
    while _alive(worker[0]):
        assert time.monotonic() < deadline, f"worker {worker[0]} outlived its SIGKILLed manager"
        time.sleep(0.1)


# -- in-process: the snapshot and restore themselves ---------------------------------------


def _passed() -> Attempt:
    return Attempt(case_id="c", platform="cpu", index=0, status="passed", seed=0)


def test_environment_paths_modules_and_interpreter_settings_are_put_back() -> None:
    import json as json_module

    limit = sys.getrecursionlimit()
    with isolated() as guard:
        os.environ["HARNESS_ISOLATION_PROBE"] = "1"
        sys.path.insert(0, "/nowhere")
        sys.modules["json"] = object()  # type: ignore[assignment]
        sys.modules["harness_fake_module"] = object()  # type: ignore[assignment]
        sys.modules["harness_blocked_module"] = None  # type: ignore[assignment]
        sys.setrecursionlimit(limit + 17)
        warnings.simplefilter("error")
    assert "HARNESS_ISOLATION_PROBE" not in os.environ
    assert "/nowhere" not in sys.path
    assert sys.modules["json"] is json_module
    assert "harness_fake_module" not in sys.modules
    assert "harness_blocked_module" not in sys.modules
    assert sys.getrecursionlimit() == limit
    with pytest.warns(UserWarning, match="not an error"):
        warnings.warn("not an error any more", UserWarning, stacklevel=1)
    assert not guard.violations
    restored = ", ".join(guard.restored)
    for label in ("os.environ (HARNESS_ISOLATION_PROBE)", "sys.path", "sys.modules", "warnings"):
        assert label in restored
    note = guard.apply(_passed()).notes["harness.restored"]
    assert "sys.getrecursionlimit()" in note


def test_numpy_and_torch_settings_are_put_back() -> None:
    np = pytest.importorskip("numpy")
    torch = pytest.importorskip("torch")
    threads, err = torch.get_num_threads(), np.geterr()
    with isolated() as guard:
        np.seterr(all="raise")
        torch.set_num_threads(threads + 3)
        torch.set_default_dtype(torch.float64)
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.set_grad_enabled(False)
        torch.backends.cudnn.benchmark = not torch.backends.cudnn.benchmark
    assert np.geterr() == err
    assert torch.get_num_threads() == threads
    assert torch.get_default_dtype() == torch.float32
    assert not torch.are_deterministic_algorithms_enabled()
    assert torch.is_grad_enabled()
    assert not guard.violations, guard.violations
    assert "torch.backends.cudnn.benchmark" in guard.restored


def test_a_torch_flag_the_harness_cannot_set_back_fails_the_attempt_naming_it() -> None:
    torch = pytest.importorskip("torch")
    before = torch.backends.cuda.flash_sdp_enabled()
    try:
        with isolated() as guard:
            torch.backends.cuda.enable_flash_sdp(not before)
    finally:
        torch.backends.cuda.enable_flash_sdp(before)
    (violation,) = guard.violations
    assert violation.startswith("torch.backends.cuda.flash_sdp_enabled() changed from")
    failed = guard.apply(_passed())
    assert failed.status == "failed" and failed.error is not None
    assert failed.error.type == "IsolationViolation"
    assert "flash_sdp_enabled" in failed.error.message and "replaced" in failed.error.message


def test_a_thread_left_running_is_named_and_an_own_failure_is_kept_first() -> None:
    stop = threading.Event()
    with isolated() as guard:
        threading.Thread(target=stop.wait, name="lingering", daemon=True).start()
    stop.set()
    (violation,) = guard.violations
    assert violation.startswith("thread 'lingering' (") and "is still running" in violation
    from harness.model import ErrorInfo

    own = ErrorInfo.make("AssertionError", "wrong answer")
    failed = Attempt(case_id="c", platform="cpu", index=0, status="failed", seed=0, error=own)
    applied = guard.apply(failed)
    assert applied.error is not None
    assert applied.error.signature == own.signature  # still grouped as the case's own failure
    assert applied.error.message.startswith("wrong answer\n(also: the case changed its worker")
    assert "lingering" in applied.notes["harness.isolation"]


def test_a_forked_child_that_leaves_the_block_touches_nothing() -> None:
    r, w = os.pipe()
    pid = -1
    try:
        with isolated() as guard:
            os.environ["HARNESS_ISOLATION_CHILD"] = "1"
            pid = os.fork()
            if pid:
                os.close(w)
                os.waitpid(pid, 0)  # the child has left the block by now
    finally:
        if pid == 0:  # the child: say what its exit from the block did, then leave
            try:
                seen = [guard.restored, os.environ.get("HARNESS_ISOLATION_CHILD")]
                os.write(w, json.dumps(seen).encode())
            finally:
                os._exit(0)
    with os.fdopen(r, "rb") as f:
        assert json.loads(f.read()) == [[], "1"]  # nothing restored in the child
    assert "os.environ (HARNESS_ISOLATION_CHILD)" in ", ".join(guard.restored)
    assert "HARNESS_ISOLATION_CHILD" not in os.environ
    assert not guard.violations, guard.violations


def test_guard_without_changes_leaves_the_attempt_alone() -> None:
    attempt = _passed()
    assert Guard().apply(attempt) is attempt


def test_a_child_that_died_before_the_attempt_is_reaped_not_blamed() -> None:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    deadline = time.monotonic() + 30
    while _alive(pid):  # until it is a zombie: exited, not reaped
        assert time.monotonic() < deadline
        time.sleep(0.01)
    with isolated() as guard:
        pass
    assert not guard.violations, guard.violations
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # already reaped: no zombie piles up in the worker


def test_the_snapshot_imports_neither_torch_nor_numpy() -> None:
    # A fresh-process worker starts bare so that a cold-import case sees a bare interpreter.
    code = (
        "import sys\n"
        "from harness.worker.isolation import isolated\n"
        "with isolated() as guard:\n"
        "    assert 'torch' not in sys.modules and 'numpy' not in sys.modules\n"
        "assert 'torch' not in sys.modules and 'numpy' not in sys.modules\n"
        "assert not guard.violations, guard.violations\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_children_are_found_with_and_without_the_proc_children_files(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from harness.worker import leftovers

    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        assert sleeper.pid in leftovers.children()
        real_open = open

        def no_children_file(path: Any, *args: Any, **kw: Any) -> Any:
            if str(path).endswith("/children"):  # a kernel without CONFIG_PROC_CHILDREN
                raise FileNotFoundError(path)
            return real_open(path, *args, **kw)

        monkeypatch.setattr(leftovers, "open", no_children_file, raising=False)
        assert sleeper.pid in leftovers.children()
    finally:
        sleeper.kill()
        sleeper.wait()
    monkeypatch.undo()
    assert sleeper.pid not in leftovers.children()


def test_tqdms_monitor_thread_is_not_blamed_on_the_first_progress_bar() -> None:
    tqdm = pytest.importorskip("tqdm")
    if tqdm.tqdm.monitor is not None:  # started by an earlier test: start a new one below
        tqdm.tqdm.monitor.exit()
        tqdm.tqdm.monitor = None
    try:
        with isolated() as guard:
            for _ in tqdm.tqdm(range(2), file=sys.stderr):
                pass
        assert tqdm.tqdm.monitor is not None and tqdm.tqdm.monitor.is_alive()
        assert not guard.violations, guard.violations
    finally:
        if tqdm.tqdm.monitor is not None:
            tqdm.tqdm.monitor.exit()
            tqdm.tqdm.monitor = None
