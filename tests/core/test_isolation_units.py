"""Isolation inside one worker process, unit by unit: what is put back, what is reported,
and what the snapshot itself must never do (import torch, blame a thread it did not see)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
from isocases import alive

from harness.model import Attempt
from harness.worker.isolation import Guard, isolated

REPO = Path(__file__).resolve().parents[2]


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
    while alive(pid):  # until it is a zombie: exited, not reaped
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
