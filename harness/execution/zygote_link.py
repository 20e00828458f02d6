"""A manager's link to a zygote (:mod:`harness.worker.zygote`): the socket it asks for
workers on, and each forked worker held as a process handle.

A forked worker is not the manager's child, so :class:`ForkedProcess` reads its exit status
from a pipe the zygote writes when it reaps the worker.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

__all__ = ["ForkedProcess", "Zygote", "recv"]


class ForkedProcess:
    """The part of :class:`subprocess.Popen` the pool uses, for a worker a zygote forked."""

    def __init__(
        self, pid: int, stdin: int, stdout: int, status: int, zygote: int, shared: bool = False
    ) -> None:
        self.pid = pid
        self.zygote = zygote  # the pid of the zygote it was forked from
        self.shared = shared  # whether that zygote serves other managers too
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
    """A connection to one zygote: a private one (``proc``, this process's child, which dies
    with it) or a shared one that another manager may have started."""

    def __init__(self, sock: socket.socket, pid: int, proc: subprocess.Popen[bytes] | None) -> None:
        self.sock = sock
        self.pid = pid
        self.proc = proc
        self.shared = proc is None
        self.lock = threading.Lock()
        self.serial = 0
        self.dead = False

    @classmethod
    def start(
        cls, python: str, boot: str, env: dict[str, str], modules: Sequence[str], log: Path
    ) -> Zygote:
        """A private zygote, started with the socket it will say ``ready`` on."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with open(log, "ab") as err:
            try:
                proc = subprocess.Popen(
                    [python, "-P", "-c", boot, str(theirs.fileno()), *modules],
                    stdin=subprocess.DEVNULL,
                    stdout=err,
                    stderr=err,
                    env={**env, "HARNESS_MANAGER_PID": str(os.getpid())},  # it dies with us
                    pass_fds=(theirs.fileno(),),
                    start_new_session=True,
                )
            finally:
                theirs.close()
        return cls(ours, proc.pid, proc)

    def wait_ready(self, timeout: float) -> bool:
        return self._recv(timeout) == b"ready"

    def _recv(self, timeout: float) -> bytes | None:
        return recv(self.sock, timeout)

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
                    raise ValueError(f"the zygote {self.pid} answered {answer!r}")
            except BaseException:
                self.dead = True
                self.close()
                raise
        return reply

    def alive(self) -> bool:
        return not self.dead and (self.proc is None or self.proc.poll() is None)

    def close(self) -> None:
        """Let it go: it forks nothing more for this process. A private one exits when its last
        worker has (killing it would kill the workers that pools still hold: their
        parent-death signal); a shared one kills the workers it forked for this process."""
        with contextlib.suppress(OSError):
            self.sock.close()
        if self.proc is not None:
            self.proc.poll()


def recv(sock: socket.socket, timeout: float) -> bytes | None:
    ready, _, _ = select.select([sock], [], [], timeout)
    if not ready:
        return None
    try:
        return sock.recv(1 << 16)
    except OSError:
        return None
