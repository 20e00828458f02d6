"""What an attempt left running in its worker: Python threads and child processes.

Neither can be undone by restoring a value: a thread that keeps running keeps acting (a thread
that calls ``probe.output`` would record into the next case), and a child process keeps holding
files, ports and devices. :func:`Leftovers.find` waits a short grace period for them to end by
themselves, then names each one that did not; child processes are killed (and reaped). The
caller fails the attempt that left them and replaces the worker, so the next case starts clean.

Child processes are found through ``/proc/<worker>/task/<tid>/children`` (Linux): the worker
makes itself a child subreaper (:func:`become_subreaper`), so a double-forked daemon that
called ``setsid`` is reparented to the worker, not to init, and is found the same way. A cheap
``waitid`` tells first whether there is any child at all, so an attempt that started none pays
one system call. Elsewhere (macOS) children are not looked for.

Not counted: threads started by native code that once called into Python
(``threading._DummyThread``, e.g. torch's autograd device threads: not the case's doing, and
they cannot end), and the library threads in :data:`BENIGN_THREADS`, started once per process
by the first use of a library and unable to act on a case (tqdm's monitor, which every
diffusers progress bar would otherwise pin on the first case that showed one).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass

# Captured at import: a target that replaces os.getpid must not fool the worker's own checks.
_getpid = os.getpid
_monotonic = time.monotonic

GRACE_S = 0.5  # how long leftovers get to end by themselves once the target has returned
_MAX_ROUNDS = 16  # kill rounds: each kill can reparent grandchildren to the worker
_PR_SET_CHILD_SUBREAPER = 36
# (module, class) of threads a library keeps for the life of the process.
BENIGN_THREADS = frozenset({("tqdm._monitor", "TMonitor")})
# Child processes the worker keeps across attempts on purpose (the leaders of the servers that
# several cases share, harness.worker.server_pool): never an attempt's leftovers.
KEPT: set[int] = set()


def become_subreaper() -> bool:
    """Make orphaned descendants of this process its children (Linux), so none escapes."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def _has_children() -> bool:
    waitid = getattr(os, "waitid", None)
    if waitid is None:
        return False
    try:
        waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return False
    except OSError:
        return True
    return True


def children() -> set[int]:
    """Pids of this process's children, live or zombie (empty where /proc is not there)."""
    if not sys.platform.startswith("linux") or not _has_children():
        return set()
    me = _getpid()
    # Children hang off the thread that forked them; orphans go to the main thread.
    tids = {me, *(t.native_id for t in threading.enumerate() if t.native_id is not None)}
    pids: set[int] = set()
    listed = False
    for tid in tids:
        try:
            with open(f"/proc/{me}/task/{tid}/children") as f:
                pids.update(int(x) for x in f.read().split())
            listed = True
        except (OSError, ValueError):
            continue
    if listed:
        return pids
    # A kernel without CONFIG_PROC_CHILDREN: scan every process for its parent.
    for entry in os.listdir("/proc"):
        if entry.isdigit() and _parent(int(entry)) == me:
            pids.add(int(entry))
    return pids


def _parent(pid: int) -> int:
    """The parent pid of a process (-1 when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        return int(data[data.rindex(b")") + 2 :].split()[1])
    except (OSError, ValueError, IndexError):
        return -1


def _command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().rstrip(b"\0").split(b"\0")
        text = " ".join(a.decode("utf-8", "replace") for a in argv)
    except OSError:
        text = ""
    return text[:120] + ("..." if len(text) > 120 else "") or "?"


def _reaped(pid: int) -> bool:
    """Reap ``pid`` if it has exited; True when it is gone (or was never ours to wait for)."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return done == pid


def _describe_thread(t: threading.Thread) -> str:
    target = getattr(t, "_target", None)
    if target is not None:
        what = f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', target)}"
    else:
        what = f"{type(t).__module__}.{type(t).__qualname__}.run"
    return f"thread {t.name!r} ({what}) is still running"


@dataclass(frozen=True)
class Leftovers:
    """The threads and child processes that existed before an attempt."""

    threads: frozenset[threading.Thread]
    children: frozenset[int]

    @classmethod
    def take(cls) -> Leftovers:
        # Reap what died since (an orphan the subreaper adopted between attempts, say).
        # A kept server is reaped by its own Popen, which keeps its exit status.
        live = frozenset(pid for pid in children() if pid in KEPT or not _reaped(pid))
        return cls(frozenset(threading.enumerate()), live)

    def find(self, grace_s: float = GRACE_S) -> list[str]:
        """What the attempt left running, one sentence each; its child processes are killed."""
        deadline = _monotonic() + grace_s
        found = self._threads(deadline)
        found += self._children(deadline)
        return found

    def _threads(self, deadline: float) -> list[str]:
        new = [
            t
            for t in threading.enumerate()
            if t not in self.threads
            and not isinstance(t, threading._DummyThread)
            and (type(t).__module__, type(t).__qualname__) not in BENIGN_THREADS
        ]
        for t in new:
            t.join(max(0.0, deadline - _monotonic()))
        return [_describe_thread(t) for t in new if t.is_alive()]

    def _children(self, deadline: float) -> list[str]:
        found: list[str] = []
        for _ in range(_MAX_ROUNDS):
            live = {pid for pid in children() - self.children - KEPT if not _reaped(pid)}
            while live and _monotonic() < deadline:
                time.sleep(0.01)
                live = {pid for pid in live if not _reaped(pid)}
            if not live:
                return found
            for pid in sorted(live):
                what = _command(pid)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, 0)
                found.append(f"child process {pid} ({what}) was still running; it was killed")
        found.append(f"more child processes kept appearing after {_MAX_ROUNDS} rounds of kills")
        return found


__all__ = ["BENIGN_THREADS", "GRACE_S", "KEPT", "Leftovers", "become_subreaper", "children"]
