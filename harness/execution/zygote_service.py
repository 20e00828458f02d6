"""Shared zygotes: one per user, interpreter, environment and harness source, listening in
the folder ``HARNESS_ZYGOTE_DIR`` names, for every manager that asks (``--listen`` in
:mod:`harness.worker.zygote`).

The first manager that needs one starts it (under a lock, so that two do not) and every later
one connects to its socket, named by a digest of what a worker forked from it inherits: the
interpreter, the boot code, the modules it imports, the environment, the process state
(:func:`harness.execution.zygote.fork_worker`'s key) and the files of the harness source and
of those modules as they are on disk (names, sizes, times), so that a zygote that imported
other versions serves nobody. The folder must be this user's alone. A zygote outlives its last
manager by ``HARNESS_ZYGOTE_IDLE`` seconds (30), and kills the workers of a manager whose
connection closes, as a private zygote's die with their manager.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import os
import signal
import socket
import stat
import struct
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from harness.execution.zygote_link import Zygote, recv
from harness.worker.zygote import addressed

__all__ = ["SHARED_ENV", "connect_shared", "source_digest", "stop_shared"]

SHARED_ENV = "HARNESS_ZYGOTE_DIR"
HARNESS_ROOT = Path(__file__).resolve().parents[1]

_started: list[subprocess.Popen[bytes]] = []  # shared zygotes this process started
_sources: dict[tuple[str, ...], str] = {}


def connect_shared(
    folder: Path,
    key: tuple[object, ...],
    python: str,
    boot: str,
    env: dict[str, str],
    modules: Sequence[str],
    timeout: float,
) -> tuple[Zygote | None, str]:
    """The shared zygote for ``key`` in ``folder``, connected to (started first when none is
    listening); (None, "") where this one cannot be shared (a private zygote serves it), or
    (None, why) where it did not start."""
    if python != sys.executable:
        return None, ""  # the sources of another interpreter's torch are not ours to stat
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = folder.lstat()
    except OSError:
        return None, ""
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
        return None, ""  # a folder another user could put a socket in
    name = hashlib.sha256(repr((key, _source(modules))).encode()).hexdigest()[:24]
    at = folder / f"{name}.sock"
    z = _connect(at, timeout)
    if z is None:
        with open(folder / f"{name}.lock", "wb") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one manager starts it, the others connect
            z = _connect(at, timeout) or _start_shared(at, python, boot, env, modules, timeout)
    if z is None:
        return None, f"the shared zygote did not start (log: {at.with_suffix('.log')})"
    return z, ""


def _connect(at: Path, timeout: float) -> Zygote | None:
    """A connection to the zygote listening at ``at``, once it said ready; None where none
    listens (or one that was exiting closed it)."""
    peer = _peer(at)
    if peer is None:
        return None
    sock, pid = peer
    try:
        if recv(sock, timeout) == b"ready":
            return Zygote(sock, pid, None)
    except OSError:
        pass
    sock.close()
    return None


def _peer(at: Path) -> tuple[socket.socket, int] | None:
    """A socket connected to ``at`` and the pid of the process of this user listening there
    (the kernel's record of it, known before that process accepts); None where none is."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        with addressed(str(at)) as address:
            sock.connect(address)
        pid, uid, _ = struct.unpack(
            "3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        )
        if uid == os.getuid():
            return sock, pid
    except OSError:
        pass
    sock.close()
    return None


def _start_shared(
    at: Path, python: str, boot: str, env: dict[str, str], modules: Sequence[str], timeout: float
) -> Zygote | None:
    """Start the shared zygote that will listen at ``at`` and connect to it. It holds none of
    this process's files (a caller reading this process's output to its end must not wait for
    it), and its log is beside its socket."""
    with open(at.with_suffix(".log"), "ab") as log:
        proc = subprocess.Popen(
            [python, "-P", "-c", boot, "--listen", str(at), *modules],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=env,
            start_new_session=True,
        )
    _started.append(proc)
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        z = _connect(at, max(0.1, deadline - time.monotonic()))
        if z is not None and z.pid == proc.pid:
            return z
        if z is not None:  # a stale one answered: it is exiting and closes on us
            z.close()
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    return None


def _source(modules: Sequence[str]) -> str:
    """:func:`source_digest` of this process's harness source and the files of ``modules``
    (found, not imported), once per process."""
    have = _sources.get(tuple(modules))
    if have is None:
        files = sorted(HARNESS_ROOT.rglob("*.py"))
        for name in modules:
            with contextlib.suppress(ImportError, ValueError):
                spec = importlib.util.find_spec(name)
                if spec is not None and spec.origin:
                    files.append(Path(spec.origin))
        have = _sources[tuple(modules)] = source_digest([*files, Path(sys.executable).resolve()])
    return have


def source_digest(files: Sequence[Path]) -> str:
    """The names, sizes and modification times of ``files`` as they are on disk now."""
    h = hashlib.sha256()
    for f in files:
        with contextlib.suppress(OSError):
            st = f.stat()
            h.update(f"{f} {st.st_size} {st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def stop_shared(folder: Path) -> list[int]:
    """Stop the shared zygotes listening in ``folder`` (SIGTERM; their workers die with them):
    the pids signalled. For the end of a test session or CI job that set the folder."""
    pids = []
    for at in sorted(folder.glob("*.sock")):
        peer = _peer(at)  # not waiting for "ready": a zygote that cannot accept stops too
        if peer is None:
            continue
        peer[0].close()
        with contextlib.suppress(ProcessLookupError):
            os.kill(peer[1], signal.SIGTERM)
            pids.append(peer[1])
    return pids
