"""Manager side of the zygote (:mod:`harness.worker.zygote`): start one per interpreter and
environment, ask it for workers, and hold each forked worker as a process handle.

A forked worker is not the manager's child, so :class:`ForkedProcess` reads its exit status
from a pipe the zygote writes when it reaps the worker. Anything that goes wrong on this path
(the zygote will not start, dies, refuses a code root) makes :func:`fork_worker` return None
and the pool spawns the worker plainly: the zygote only saves time, it never decides a result.
``HARNESS_FORK_WORKERS=0`` turns it off.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import resource
import select
import signal
import socket
import subprocess
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

from harness.model.provenance import CHECKOUT_ENV

__all__ = ["ForkedProcess", "close_all", "enabled", "fork_worker", "renew"]

# Variables that differ between workers of one zygote and that nothing reads at import time:
# the worker is given them in its environment after the fork. (The side's checkout differs
# between a comparison's two sides, whose pair of a round shares one zygote.)
PER_WORKER_ENV = frozenset(
    {
        "PYTHONPATH",
        "HARNESS_REPLY_KEY_FD",
        "HARNESS_PLATFORM",
        "PYTEST_CURRENT_TEST",
        CHECKOUT_ENV,
    }
)
# Zygotes kept alive at once (each holds torch's memory); the least recently used goes first.
MAX_ZYGOTES = 2
ENV_SWITCH = "HARNESS_FORK_WORKERS"


def enabled(environ: Mapping[str, str]) -> bool:
    return environ.get(ENV_SWITCH, "1").strip().lower() not in ("0", "false", "no", "off")


class ForkedProcess:
    """The part of :class:`subprocess.Popen` the pool uses, for a worker a zygote forked."""

    def __init__(self, pid: int, stdin: int, stdout: int, status: int, zygote: int) -> None:
        self.pid = pid
        self.zygote = zygote  # the pid of the zygote it was forked from
        self.args = ["<forked worker>", str(pid)]
        self.stdin: IO[bytes] | None = os.fdopen(stdin, "wb")
        self.stdout: IO[bytes] | None = os.fdopen(stdout, "rb")
        self._status = status
        self.returncode: int | None = None

    def _read_status(self, timeout: float | None) -> bool:
        if self.returncode is not None:
            return True
        ready, _, _ = select.select([self._status], [], [], timeout)
        if not ready:
            return False
        data = os.read(self._status, 64)
        os.close(self._status)
        if data.strip():
            self.returncode = os.waitstatus_to_exitcode(int(data))
        else:
            # The zygote died before it reaped the worker; its death signal killed the worker.
            self.returncode = -signal.SIGKILL
        return True

    def poll(self) -> int | None:
        self._read_status(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._read_status(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        assert self.returncode is not None
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)


class Zygote:
    """One zygote process and the socket to it."""

    def __init__(
        self, python: str, boot: str, env: dict[str, str], modules: Sequence[str], log: Path
    ) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock = ours
        self.lock = threading.Lock()
        self.serial = 0
        self.dead = False
        self.log = log
        with open(log, "ab") as err:
            try:
                self.proc = subprocess.Popen(
                    [python, "-P", "-c", boot, str(theirs.fileno()), *modules],
                    stdin=subprocess.DEVNULL,
                    stdout=err,
                    stderr=err,
                    env=env,
                    pass_fds=(theirs.fileno(),),
                    start_new_session=True,
                )
            finally:
                theirs.close()

    def wait_ready(self, timeout: float) -> bool:
        return self._recv(timeout) == b"ready"

    def _recv(self, timeout: float) -> bytes | None:
        ready, _, _ = select.select([self.sock], [], [], timeout)
        if not ready:
            return None
        try:
            return self.sock.recv(1 << 16)
        except OSError:
            return None

    def fork(
        self, request: Mapping[str, object], fds: list[int], timeout: float
    ) -> dict[str, object]:
        """The zygote's answer to ``request``; a zygote that does not answer it in time, or
        answers another, is let go (a late answer must never be taken for the next one's)."""
        with self.lock:
            self.serial += 1
            try:
                socket.send_fds(
                    self.sock, [json.dumps({**request, "id": self.serial}).encode()], fds
                )
                answer = self._recv(timeout)
                reply: dict[str, object] = json.loads(answer or b"null") or {}
                if reply.get("id") != self.serial:
                    raise ValueError(f"the zygote {self.proc.pid} answered {answer!r}")
            except BaseException:
                self.dead = True
                self.close()
                raise
        return reply

    def alive(self) -> bool:
        return not self.dead and self.proc.poll() is None

    def close(self) -> None:
        """Let it go: it forks nothing more and exits when its last worker has (killing it
        would kill the workers that pools still hold: their parent-death signal)."""
        with contextlib.suppress(OSError):
            self.sock.close()
        self.proc.poll()


_zygotes: OrderedDict[tuple[object, ...], Zygote] = OrderedDict()
_broken: set[tuple[object, ...]] = set()
_lock = threading.Lock()


def _umask() -> int:
    """The process's umask, read without setting it (Linux >= 4.7), else set and put back."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    umask = os.umask(0o022)
    os.umask(umask)
    return umask


def _inherited() -> tuple[object, ...]:
    """What a spawned worker inherits from the manager besides its environment, as it is now:
    a zygote serves only a manager still in that state (a forked worker inherits the zygote's)."""
    umask = _umask()
    limits = tuple(
        resource.getrlimit(getattr(resource, name))
        for name in sorted(dir(resource))
        if name.startswith("RLIMIT_")
    )
    affinity = tuple(sorted(os.sched_getaffinity(0))) if hasattr(os, "sched_getaffinity") else ()
    return umask, limits, affinity, os.getpriority(os.PRIO_PROCESS, 0)


def _zygote(
    python: str, boot: str, env: dict[str, str], modules: Sequence[str], log: Path, timeout: float
) -> tuple[Zygote | None, str]:
    key = (python, boot, tuple(modules), tuple(sorted(env.items())), _inherited())
    with _lock:
        if key in _broken:
            return None, "the zygote did not start earlier in this process"
        z = _zygotes.get(key)
        if z is not None and z.alive():
            _zygotes.move_to_end(key)
            return z, ""
        if z is not None:
            z.close()
            del _zygotes[key]
        z = Zygote(python, boot, env, modules, log)
        if not z.wait_ready(timeout):
            z.close()
            with contextlib.suppress(ProcessLookupError):
                os.kill(z.proc.pid, signal.SIGKILL)
            _broken.add(key)  # not again in this process: plain spawns from here on
            return None, f"the zygote did not start (log: {log})"
        with contextlib.suppress(OSError):
            if log.stat().st_size == 0:  # a start that said nothing
                log.unlink()
        _zygotes[key] = z
        while len(_zygotes) > MAX_ZYGOTES:
            _zygotes.popitem(last=False)[1].close()
        return z, ""


def fork_worker(
    *,
    python: str,
    boot: str,
    argv: Sequence[str],
    env: Mapping[str, str],
    code_roots: Sequence[str],
    cwd: str | None,
    modules: Sequence[str],
    log_fd: int,
    log_dir: Path,
    key_fd: int,
    timeout: float,
) -> tuple[ForkedProcess | None, str]:
    """A worker forked from the zygote for ``python`` and ``env`` (started on first use), as
    ``[python, -P, -c, boot, *argv]`` with ``env`` would have started it; or None and why not
    (the caller spawns it plainly)."""
    if not enabled(env):
        return None, f"{ENV_SWITCH} is off"
    base = {k: v for k, v in env.items() if k not in PER_WORKER_ENV}
    pythonpath = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    # the zygote's import path is the worker's without the code roots in front
    if pythonpath[: len(code_roots)] != list(code_roots):
        return None, "PYTHONPATH does not start with the code roots"
    rest = pythonpath[len(code_roots) :]
    if rest:
        base["PYTHONPATH"] = os.pathsep.join(rest)
    t0 = time.monotonic()
    try:
        log = log_dir / f"zygote-{os.getpid()}-{len(_zygotes) + len(_broken)}.log"
        z, why = _zygote(python, boot, base, modules, log, timeout)
        if z is None:
            return None, why
    except OSError as exc:
        return None, f"the zygote did not start: {exc}"
    stdin_r, stdin_w = os.pipe()
    stdout_r, stdout_w = os.pipe()
    status_r, status_w = os.pipe()
    try:
        request: dict[str, object] = {
            "argv": list(argv),
            "env": dict(env),
            "code_roots": list(code_roots),
            # a spawn with no working folder given runs in the manager's current one
            "cwd": os.path.join(os.getcwd(), cwd or ""),
        }
        try:
            reply = z.fork(
                request,
                [stdin_r, stdout_w, log_fd, key_fd, status_w],
                max(1.0, timeout - (time.monotonic() - t0)),
            )
        finally:
            for fd in (stdin_r, stdout_w, status_w):
                os.close(fd)
    except (OSError, ValueError) as exc:  # a zygote that died or answered nonsense
        reply = {"refused": f"it failed: {exc}"}
    pid = reply.get("pid")
    if not isinstance(pid, int):
        for fd in (stdin_w, stdout_r, status_r):
            os.close(fd)
        return None, f"the zygote refused: {reply.get('refused')}"
    return ForkedProcess(pid, stdin_w, stdout_r, status_r, z.proc.pid), ""


def renew() -> None:
    """Workers started from now on come from new zygotes, hence new processes all through: a
    comparison's fresh pair of workers per round must not inherit one memory layout (which
    the zygote's exec randomized once) round after round; see :mod:`harness.execution.paired`."""
    close_all()


def close_all() -> None:
    """Stop every zygote of this process (its workers live on until their pools close them)."""
    with _lock:
        for z in _zygotes.values():
            z.close()
        for z in _zygotes.values():
            # it exits once its workers have, which the pools have killed by now
            with contextlib.suppress(subprocess.TimeoutExpired):
                z.proc.wait(timeout=5)
        _zygotes.clear()


atexit.register(close_all)
