"""Manager side of the workers: start them, send requests, survive their hangs and crashes.

One persistent worker per group (code root x platform) runs attempts back to back; a case with
``fresh_process = true`` gets a worker of its own for one attempt. A worker that hangs past the
attempt's timeout is asked for the stacks of all its threads (SIGUSR1 -> faulthandler), then
killed with its whole process group; a worker that dies is reported with its signal or exit
code. Either way the handle is dropped and the next attempt starts a new worker.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO

from harness import platforms
from harness.errors import WorkerError
from harness.execution.spawn import import_env, prestart_zygote, start_worker
from harness.platforms.devices import pin_env
from harness.worker import protocol as p
from harness.worker.imports import WHERE_IT_IMPORTS

# Importing torch in the worker before the first attempt keeps its one-off import cost out of
# the first attempt's duration and lets the worker seed torch before every attempt.
DEFAULT_PREIMPORT: tuple[str, ...] = ("numpy", "torch")
STARTUP_TIMEOUT_S = 120.0
# What a persistent worker imports before it says it is ready, after the profile's preimports:
# the attempt runner, and the quality checks and layered references it imports when it checks
# outputs (numpy, PyAV, the reference store). A fresh-process worker imports those only if its
# case checks an output.
WORKER_MODULES: tuple[str, ...] = (
    "harness.worker.attempt",
    "harness.checks.quality",
    "harness.references.layered",
)


class WorkerTimeout(Exception):
    """The worker did not answer in time; ``stacks`` holds its threads' stacks."""

    def __init__(self, seconds: float, stacks: str) -> None:
        super().__init__(f"no answer after {seconds:.1f} s")
        self.seconds = seconds
        self.stacks = stacks


class WorkerCrashed(Exception):
    """The worker process died; ``how`` says by which signal or exit code."""

    def __init__(self, how: str, returncode: int | None, stacks: str) -> None:
        super().__init__(how)
        self.how = how
        self.returncode = returncode
        self.stacks = stacks


def describe_exit(returncode: int | None) -> str:
    if returncode is None:
        return "worker vanished"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"worker killed by {name}"
    return f"worker exited with code {returncode}"


class ProtocolViolation(Exception):
    """The worker's answer did not answer the request (wrong nonce, pid, case or attempt)."""


@dataclass(frozen=True)
class WorkerSpec:
    """How to start a worker: the side it serves, where that side's code lives, the platform.

    A fresh-process worker (``fresh=True``) imports nothing before its one attempt, so a
    cold-import case sees a bare interpreter.
    """

    platform: str
    code_roots: tuple[str, ...] = ()
    python: str = sys.executable
    preimport: tuple[str, ...] = DEFAULT_PREIMPORT
    # what the case that starts it requires, imported at start-up (workers.case_worker: why)
    warm: tuple[str, ...] = field(default=(), compare=False)
    cwd: str | None = None
    extra_env: tuple[tuple[str, str], ...] = ()
    side: str = "head"
    fresh: bool = False
    # The devices this worker owns (0-based, within what the manager sees); pinned at spawn
    # through the platform's visible-devices variable. Empty: not pinned.
    devices: tuple[int, ...] = ()
    # How long the worker may take to start (platform policy ``timeouts.worker_start_s``).
    start_timeout_s: float = STARTUP_TIMEOUT_S

    @property
    def group(self) -> str:
        return f"{self.side}:{self.platform}@{':'.join(self.code_roots) or '.'}"

    def pin_env(self) -> dict[str, str]:
        """The environment variables that pin this worker to :attr:`devices`."""
        try:
            plat = platforms.get(self.platform)
        except KeyError:
            return {}
        return pin_env(plat, self.devices, os.environ)


def worker_env(spec: WorkerSpec) -> dict[str, str]:
    """The environment a worker of ``spec`` starts with (its reply key's pipe aside)."""
    env = import_env(spec.code_roots, os.environ)
    env["HARNESS_PLATFORM"] = spec.platform
    env["HARNESS_MANAGER_PID"] = str(os.getpid())
    env.update(spec.pin_env())
    env.update(dict(spec.extra_env))
    return env


def worker_modules(spec: WorkerSpec) -> tuple[str, ...]:
    """What a worker of ``spec`` imports before it says it is ready: a persistent one also
    imports the attempt runner (the checks, the metrics), a one-off cost of the worker's
    start, never of its first case, and :attr:`WorkerSpec.warm`; a fresh-process one nothing."""
    if spec.fresh:
        return ()
    warm = tuple(WHERE_IT_IMPORTS + m for m in spec.warm if m not in spec.preimport)
    return (*spec.preimport, *warm, *WORKER_MODULES)


def prestart(spec: WorkerSpec, log: Path) -> bool:
    """Start the zygote a worker of ``spec`` will be forked from, without waiting for it
    (:func:`harness.execution.spawn.prestart_zygote`; ``log``: its output, removed once it
    says ready having said nothing). Never raises: it only saves time."""
    if spec.fresh:
        return False
    try:
        return prestart_zygote(
            python=spec.python,
            env=worker_env(spec),
            code_roots=spec.code_roots,
            preimport=worker_modules(spec),
            log=log,
        )
    except (OSError, ValueError):
        return False


class WorkerHandle:
    """One live worker process and the pipes to it."""

    def __init__(self, spec: WorkerSpec, log_dir: Path, serial: int) -> None:
        self.spec = spec
        log_dir.mkdir(parents=True, exist_ok=True)
        stem = f"{spec.side}-{spec.platform}-{serial:03d}"
        self.log_path = log_dir / f"{stem}.log"
        self.dump_path = log_dir / f"{stem}.stacks"
        self.dump_path.touch()
        env = worker_env(spec)
        args = ["--stackdump", str(self.dump_path)]
        preimport = worker_modules(spec)
        for mod in preimport:
            args += ["--preimport", mod]
        self._log: IO[bytes] = open(self.log_path, "ab")  # noqa: SIM115 - closed in close()
        # The worker signs every reply with this key, read from a pipe into memory that a fork
        # does not copy: a child forked from it cannot answer for it (protocol.sign).
        self._key = secrets.token_bytes(p.KEY_BYTES)
        key_r, key_w = os.pipe()
        os.write(key_w, self._key)
        os.close(key_w)
        env["HARNESS_REPLY_KEY_FD"] = str(key_r)
        self.unsigned: list[str] = []  # lines some other process wrote into the protocol
        # Seconds the worker may need at exit to stop the servers cases shared in it (set by
        # the executor after an attempt that left one running); 0: none.
        self.servers_stop_s = 0.0
        try:
            self.proc = start_worker(
                python=spec.python,
                args=args,
                env=env,
                cwd=spec.cwd,
                code_roots=spec.code_roots,
                preimport=preimport,
                fresh=spec.fresh,
                log=self._log,
                log_dir=log_dir,
                key_fd=key_r,
                timeout=spec.start_timeout_s,
            )
        finally:
            os.close(key_r)
        self.pid = self.proc.pid
        self._buf = b""
        self._sent_dump = 0
        self.attempts_served = 0
        try:
            line = self._read_line(spec.start_timeout_s)
            ready = p.decode_reply(line, nonce=None, pid=self.pid, key=self._key)
        except p.ProtocolError as exc:
            self.kill()
            raise WorkerError(
                f"worker for {spec.group} sent a bad start-up line ({exc}); log: {self.log_path}"
            ) from exc
        except WorkerTimeout as exc:
            self.kill()
            raise WorkerError(
                f"worker for {spec.group} did not start within {spec.start_timeout_s:.0f} s "
                "(policy timeouts.worker_start_s); "
                f"log: {self.log_path}"
            ) from exc
        except WorkerCrashed as exc:
            raise WorkerError(
                f"worker for {spec.group} died at start-up ({exc.how}); log: {self.log_path}\n"
                + self._log_tail()
            ) from exc
        except BaseException:
            # A Ctrl-C while it starts: nobody holds this handle yet, so end the process here.
            self.kill()
            raise
        if not isinstance(ready, p.Ready):
            self.kill()
            raise WorkerError(f"worker for {spec.group} sent {ready!r} instead of 'ready'")
        self._nonce = 0

    def _log_tail(self, n: int = 4000) -> str:
        try:
            return self.log_path.read_bytes()[-n:].decode("utf-8", "replace")
        except OSError:
            return ""

    def _dump_offset(self) -> int:
        try:
            return self.dump_path.stat().st_size
        except OSError:
            return 0

    def _read_dump(self, offset: int) -> str:
        try:
            with self.dump_path.open("rb") as f:
                f.seek(offset)
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def _read_line(self, timeout: float, offset: int | None = None) -> bytes:
        """The next line, within ``timeout``; a hang or crash is raised with the stacks the
        worker dumped past ``offset`` (default: the dump's size now)."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        offset = self._dump_offset() if offset is None else offset
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WorkerTimeout(timeout, self._collect_stacks(offset))
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                rc = self._wait_exit()
                raise WorkerCrashed(describe_exit(rc), rc, self._read_dump(offset))
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line

    def _wait_exit(self) -> int | None:
        try:
            return self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()
            return self.proc.returncode

    def _collect_stacks(self, offset: int) -> str:
        """Ask faulthandler for every thread's stack, give it a moment, then read it."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGUSR1)
            deadline = time.monotonic() + 2.0
            last = -1
            while time.monotonic() < deadline:
                size = self._dump_offset()
                if size > offset and size == last:
                    break  # the dump stopped growing
                last = size
                time.sleep(0.05)
        return self._read_dump(offset)

    def next_nonce(self) -> str:
        self._nonce += 1
        return f"{self.pid}-{self._nonce}"

    def request(
        self,
        msg: p.Request,
        timeout: float,
        *,
        case_id: str | None = None,
        index: int | None = None,
    ) -> p.Reply:
        """Send one request and wait for the answer to it.

        Raises WorkerTimeout or WorkerCrashed, or ProtocolViolation when the line that came
        back does not answer this request from this worker (the worker is then killed: a
        worker that said something unexpected is not trusted with the next case).
        """
        self.send(msg)
        return self.receive(msg, time.monotonic() + timeout, timeout, case_id=case_id, index=index)

    def send(self, msg: p.Request, *, line: str | None = None) -> None:
        """Write one request (its answer is read by :meth:`receive`), or ``line``, its text
        made already; WorkerCrashed when the worker is gone."""
        assert self.proc.stdin is not None
        # a crash's stacks are what the dump gains from now on (its answer may be read late)
        self._sent_dump = self._dump_offset()
        try:
            self.proc.stdin.write((p.encode(msg) if line is None else line).encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            rc = self._wait_exit()
            raise WorkerCrashed(describe_exit(rc), rc, "") from None

    def receive(
        self,
        msg: p.Request,
        deadline: float,
        timeout: float,
        *,
        case_id: str | None = None,
        index: int | None = None,
    ) -> p.Reply:
        """The answer to ``msg``, sent earlier, by ``deadline`` (``time.monotonic``;
        ``timeout``: the limit it stands for, as the error names it)."""
        while True:
            try:
                line = self._read_line(max(0.0, deadline - time.monotonic()), self._sent_dump)
            except WorkerTimeout as exc:
                raise WorkerTimeout(timeout, exc.stacks) from None
            try:
                reply = p.decode_reply(
                    line, nonce=msg.nonce, pid=self.pid, case_id=case_id, index=index, key=self._key
                )
            except p.Unsigned as exc:
                # Not the worker's answer: skip it and wait for the real one. The pool replaces
                # this worker before its next attempt (see alive()).
                self.unsigned.append(str(exc))
                self._log.write(f"[harness] ignored: {exc}\n".encode())
                self._log.flush()
                continue
            except p.ProtocolError as exc:
                self.kill()
                raise ProtocolViolation(f"worker {self.pid} ({self.spec.group}): {exc}") from None
            return reply

    def alive(self) -> bool:
        """Running, and trusted with another attempt: no other process wrote into its
        protocol (a worker whose protocol a child shared is replaced)."""
        return self.proc.poll() is None and not self.unsigned

    def kill(self) -> None:
        """Kill the worker and anything it started (its own process group)."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):  # SIGKILL is not ignored
            self.proc.wait(timeout=10)
        self._close_files()

    def close(self) -> None:
        """End the worker. Every answer it owed is already read and its log is a plain file, so
        there is nothing to flush: skip the interpreter's slow teardown (torch takes ~1 s).
        A worker that keeps shared servers is asked to exit first, so that it stops them
        (graceful, then killed, what they left written to its log) before it is killed."""
        if self.servers_stop_s and self.proc.poll() is None and self.proc.stdin is not None:
            with contextlib.suppress(OSError, ValueError, subprocess.TimeoutExpired):
                self.proc.stdin.write(p.encode(p.ExitRequest()).encode())
                self.proc.stdin.flush()
                self.proc.wait(timeout=self.servers_stop_s)
        self.kill()

    def _close_files(self) -> None:
        for f in (self.proc.stdin, self.proc.stdout):
            if f is not None:
                with contextlib.suppress(OSError):
                    f.close()
        self._log.close()


class WorkerPool:
    """Live workers by group; a broken one is dropped and replaced on next use."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self._workers: dict[WorkerSpec, WorkerHandle] = {}
        self._fresh: list[WorkerHandle] = []
        self._serial = 0
        self.started = 0
        self.start_seconds = 0.0  # wall time spent starting workers, for overhead accounting

    def _new(self, spec: WorkerSpec) -> WorkerHandle:
        self._serial += 1
        self.started += 1
        t0 = time.perf_counter()
        try:
            return WorkerHandle(spec, self.log_dir, self._serial)
        finally:
            self.start_seconds += time.perf_counter() - t0

    def get(self, spec: WorkerSpec) -> WorkerHandle:
        handle = self._workers.get(spec)
        if handle is None or not handle.alive():
            if handle is not None:
                handle.kill()
            handle = self._new(spec)
            self._workers[spec] = handle
        return handle

    def live(self, spec: WorkerSpec) -> WorkerHandle | None:
        """The running worker of ``spec`` that :meth:`get` would return, without starting one."""
        handle = self._workers.get(spec)
        return handle if handle is not None and handle.alive() else None

    def fresh(self, spec: WorkerSpec) -> WorkerHandle:
        """A bare worker of its own, for one fresh-interpreter attempt; the caller closes it
        (and :meth:`close` kills it if the caller could not, e.g. on a second Ctrl-C)."""
        handle = self._new(replace(spec, fresh=True))
        self._fresh.append(handle)
        return handle

    def discard(self, spec: WorkerSpec, *, graceful: bool = False) -> None:
        """Drop the worker of ``spec``: killed, or (``graceful``: it answers) asked to exit
        first, so that it stops the servers it keeps."""
        handle = self._workers.pop(spec, None)
        if handle is not None:
            handle.close() if graceful else handle.kill()

    def close(self) -> None:
        for handle in [*self._workers.values(), *self._fresh]:
            handle.close()
        self._workers.clear()
        self._fresh.clear()
