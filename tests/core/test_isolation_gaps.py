"""Isolation gaps issue 18's battery found, one test each, driving
:func:`harness.worker.isolation.isolated` in this process: logging configuration, flushed
denormals, monkeypatched module attributes, the scheduler (affinity, niceness), resource
limits, the default socket timeout and the C environment. What a target's finalizers change
during the worker's garbage collection is in test_isolation (it needs a real worker)."""

from __future__ import annotations

import json
import logging
import logging.config
import os
import resource
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from corecases import write_cases
from isocases import ISOMOD

from harness.worker.isolation import Guard, isolated


def _check(change: Callable[[], Any], observe: Callable[[], None], label: str) -> Guard:
    """Run ``change`` inside an attempt's isolation; afterwards ``observe`` must hold and the
    guard must have restored (or reported) ``label``."""
    with isolated() as guard:
        change()
    observe()
    said = ", ".join(guard.restored + guard.violations)
    assert label in said, said
    return guard


@pytest.fixture
def logger() -> Iterator[logging.Logger]:
    log = logging.getLogger("harness.gaps.existing")
    yield log
    logging.disable(logging.NOTSET)


def test_logging_configuration_and_disable_are_put_back(logger: logging.Logger) -> None:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level

    def change() -> None:
        logging.basicConfig(level=logging.DEBUG, force=True)
        logging.config.dictConfig({"version": 1, "disable_existing_loggers": True})
        logging.disable(logging.CRITICAL)

    def observe() -> None:
        assert logging.root.manager.disable == logging.NOTSET
        assert root.handlers == handlers and root.level == level
        assert not logger.disabled and logger.isEnabledFor(logging.WARNING)

    _check(change, observe, "logging configuration")


def test_a_handler_or_filter_swapped_on_any_logger_is_put_back(logger: logging.Logger) -> None:
    # Same counts as before, another object: the check compares the handlers and filters
    # themselves, on every logger, not only how many there are.
    mine, theirs = logging.NullHandler(), logging.NullHandler()
    keep, other = logging.Filter("a"), logging.Filter("b")
    logger.addHandler(mine)
    logger.addFilter(keep)

    def change() -> None:
        logger.handlers[0] = theirs
        logger.filters[0] = other

    def observe() -> None:
        assert logger.handlers == [mine] and logger.filters == [keep]

    try:
        _check(change, observe, "logging configuration (harness.gaps.existing)")
    finally:
        logger.removeHandler(mine)
        logger.removeFilter(keep)


def test_flushing_denormals_is_put_back() -> None:
    torch = pytest.importorskip("torch")
    tiny = [5e-324]

    def observe() -> None:
        assert tiny[0] * 1.0 != 0.0, "denormals are flushed to zero"

    _check(lambda: torch.set_flush_denormal(True), observe, "torch.set_flush_denormal()")


def test_monkeypatched_module_attributes_are_put_back() -> None:
    clock, getpid, dumps = time.perf_counter, os.getpid, __import__("json").dumps

    def change() -> None:
        time.perf_counter = lambda: 0.0
        os.getpid = lambda: 1
        __import__("json").dumps = lambda *a, **k: "{}"
        sys.harness_gap_added = True  # type: ignore[attr-defined]

    def observe() -> None:
        assert time.perf_counter is clock and os.getpid is getpid
        assert __import__("json").dumps is dumps
        assert not hasattr(sys, "harness_gap_added")

    guard = _check(change, observe, "time.perf_counter")
    assert "os.getpid" in guard.restored[0] and "json.dumps" in guard.restored[0]


def _rlimit_lowered() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NPROC)
    resource.setrlimit(resource.RLIMIT_NPROC, (min(soft, 4096) if soft > 0 else 4096, hard))


@pytest.mark.parametrize(
    ("name", "change", "read", "label"),
    [
        (
            "affinity",
            lambda: os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}),
            lambda: os.sched_getaffinity(0),
            "os.sched_getaffinity(0)",
        ),
        (
            "nice",
            lambda: os.nice(1),
            lambda: os.getpriority(os.PRIO_PROCESS, 0),
            "os.nice()",
        ),
        (
            "rlimit",
            _rlimit_lowered,
            lambda: resource.getrlimit(resource.RLIMIT_NPROC),
            "resource.RLIMIT_NPROC",
        ),
        (
            "socket-timeout",
            lambda: socket.setdefaulttimeout(3.0),
            socket.getdefaulttimeout,
            "socket.getdefaulttimeout()",
        ),
    ],
)
def test_scheduler_limits_and_socket_timeout_are_put_back_or_reported(
    name: str, change: Callable[[], Any], read: Callable[[], Any], label: str
) -> None:
    if name == "affinity" and len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU: an affinity change would not change anything")
    before = read()
    with isolated() as guard:
        change()
        changed = read() != before
    assert changed or name == "rlimit", f"{name}: the change did not take"
    if label in ", ".join(guard.violations):  # e.g. niceness, unprivileged: cannot go back
        assert (
            guard.apply(
                __import__("harness.model", fromlist=["Attempt"]).Attempt(
                    case_id="c", platform="cpu", index=0, status="passed", seed=0
                )
            ).status
            == "failed"
        )
        return
    assert read() == before, name
    if changed:
        assert label in ", ".join(guard.restored), guard.restored


def test_os_putenv_is_put_back_in_the_c_environment() -> None:
    def seen_by_a_child() -> str:
        out = subprocess.run(
            ["sh", "-c", 'printf %s "$HARNESS_PUTENV"'], capture_output=True, text=True, check=True
        )
        return out.stdout

    def change() -> None:
        os.putenv("HARNESS_PUTENV", "leaked")
        assert seen_by_a_child() == "leaked"

    def observe() -> None:
        assert seen_by_a_child() == ""
        assert "HARNESS_PUTENV" not in os.environ

    _check(change, observe, "the C environment (os.putenv: HARNESS_PUTENV)")


@pytest.mark.slow
def test_a_child_forked_through_libc_that_fakes_the_workers_pid_cannot_answer(
    project: Path,
) -> None:
    (project / "code" / "isomod.py").write_text(ISOMOD)
    write_cases(
        project,
        "forge.toml",
        '[[case]]\nid = "a-forge"\nkind = "loader"\ntarget = "isomod:libc_fork_forges"\n'
        'retries = 0\n[[case]]\nid = "b-after"\nkind = "loader"\ntarget = "isomod:observe_pid"\n',
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.cli",
            "run",
            "cases",
            "--code-root",
            "code",
            "--run-id",
            "forge",
        ],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    doc = json.loads((project / "reports" / "forge" / "report.json").read_text())
    cases = {c["id"]: c for c in doc["cases"]}
    (forged,) = cases["a-forge"]["attempts"]
    assert forged["status"] == "failed", (forged["status"], forged["error"], proc.stderr[-2000:])
    assert "the real result" in forged["error"]["message"]
    (after,) = cases["b-after"]["attempts"]
    assert after["status"] == "passed" and after["worker_pid"] != forged["worker_pid"]
    logs = "".join(f.read_text() for f in (project / "reports" / "forge" / "workers").glob("*.log"))
    assert "ignored: a line not signed by the worker" in logs


def test_replies_are_checked_against_the_workers_key() -> None:
    from harness.worker import protocol as p

    key, other = b"k" * p.KEY_BYTES, b"\0" * p.KEY_BYTES
    ready = p.Ready(pid=7)
    assert p.decode_reply(p.encode(ready, key=p.sign(key, "")), nonce=None, pid=7, key=key)
    for line in (p.encode(ready), p.encode(ready, key=p.sign(other, ""))):
        with pytest.raises(p.Unsigned):
            p.decode_reply(line, nonce=None, pid=7, key=key)
    # signed, but for another request: a protocol error of the worker itself, not skipped
    err = p.ErrorReply("old", 7, "boom")
    with pytest.raises(p.ProtocolError) as info:
        p.decode_reply(p.encode(err, key=p.sign(key, "old")), nonce="new", pid=7, key=key)
    assert not isinstance(info.value, p.Unsigned)
