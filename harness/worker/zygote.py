"""The zygote: an interpreter that imports torch once and forks persistent workers from it.

A worker's start-up is dominated by ``import torch`` (3-4 s of CPU on a 2-core runner), and a
run starts the same worker again after every crash, hang, leftover process or case with a code
root of its own, and once per side. The manager (:mod:`harness.execution.zygote`) starts one
zygote per interpreter and environment; the zygote imports what a persistent worker imports
before it says it is ready (numpy, torch, the attempt runner) and nothing of the code under
test, then forks a worker on each request. The forked child becomes exactly what
``python -P -c <boot> --stackdump ...`` would have been (``worker_argv`` in
:mod:`harness.execution.spawn`): its own session, the manager's pipes as stdin and stdout,
the log as stderr, the request's environment, working folder and import path (the side's
code roots first), then :func:`harness.worker.main.main`.

What a fork cannot reproduce it refuses, and the manager spawns that worker plainly: a code
root holding a module that the zygote already imported from elsewhere (the worker would have
imported the code root's). Workers forked from one zygote share its string-hash seed, as the
attempts in one worker always did.

The protocol is one ``SOCK_SEQPACKET`` socket (fd in ``argv``): the zygote sends ``ready``;
each request is a JSON packet with the file descriptors it names (stdin, stdout, log, reply
key, status pipe); the answer is ``{"pid": N}`` or ``{"refused": why}``. When a child exits,
its wait status goes into its status pipe, whose other end the manager holds.

A shared zygote (``--listen PATH``) serves every manager of one user, interpreter, environment
and harness source that connects to the socket at ``PATH``, one connection per manager, the
same protocol on each (``ready`` when it accepts). It is nobody's child for long: it kills a
manager's workers when that manager's connection closes (the manager exited or died, as a
private zygote's workers die with it), and it exits once it has had no manager and no worker
for ``HARNESS_ZYGOTE_IDLE`` seconds (30 by default) or its socket is no longer at ``PATH``.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import select
import signal
import socket
import sys
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness.worker.imports import preimport

MAX_FDS = 5
PACKET = 1 << 20
IDLE_ENV = "HARNESS_ZYGOTE_IDLE"
IDLE_S = 30.0


def shadowed(code_roots: list[str]) -> str | None:
    """Why a worker with ``code_roots`` first on its path would import something other than
    what this process has loaded (None: it would import the same): a code root holds a
    top-level module or package that is loaded here from another file."""
    loaded = {name.partition(".")[0] for name in sys.modules}
    loaded |= {"sitecustomize", "usercustomize"}  # run at start-up from the path
    for root in code_roots:
        try:
            entries = os.listdir(root)
        except OSError:
            continue
        for entry in entries:
            name = entry.partition(".")[0]
            if name not in loaded or not name.isidentifier():
                continue
            path = Path(root, entry)
            # what the import system would take for `name`: a folder of that very name, or a
            # module file (``name.py``, ``name.cpython-311-x86_64-linux-gnu.so``, ...)
            if entry == name:
                if not path.is_dir():
                    continue
            elif not entry.endswith((".py", ".pyc", ".so", ".pyd")) or path.is_dir():
                continue
            module = sys.modules.get(name)
            if module is None:
                return f"{path} would be imported at start-up as {name}"
            here = [*getattr(module, "__path__", ()), getattr(module, "__file__", None) or ""]
            if not any(_same(path, Path(p)) for p in here if p):
                return f"{path} shadows {name}, loaded from {here[0] or 'a built-in'}"
    return None


def _same(entry: Path, loaded: Path) -> bool:
    with contextlib.suppress(OSError):
        return entry.resolve() == loaded.resolve()
    return False


def _child(
    req: dict[str, Any], fds: list[int], parent: int, keep_closed: list[int], path: list[str]
) -> None:
    """In the forked child: become the worker the request describes; never returns."""
    code = 1
    try:
        os.setsid()  # its own process group: the manager kills it as a whole
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in keep_closed:
            with contextlib.suppress(OSError):
                os.close(fd)
        stdin_r, stdout_w, log_fd, key_r, status_w = fds
        os.close(status_w)
        for target, fd in ((0, stdin_r), (1, stdout_w), (2, log_fd)):
            os.dup2(fd, target)
            os.close(fd)
        if req.get("cwd"):
            os.chdir(req["cwd"])
        env = dict(req["env"])
        env["HARNESS_REPLY_KEY_FD"] = str(key_r)
        os.environ.clear()
        os.environ.update(env)
        sys.path[:] = [*req["code_roots"], *path]
        importlib.invalidate_caches()
        sys.argv = ["-c", *req["argv"]]
        sys.modules.pop(__name__, None)  # a spawned worker never imported this module
        from harness.worker.main import main

        code = main(req["argv"], parent_pid=parent)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


class Server:
    """The zygote's loop: a worker forked for each request on a manager's socket, each child's
    wait status delivered to its status pipe; ``children`` maps a live child's pid to that
    pipe's write end and ``owner`` to the socket of the manager that asked for it; ``held``:
    the sockets this process holds (a child closes them all)."""

    def __init__(self, path: list[str]) -> None:
        self.path = path
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.set_wakeup_fd(self.wake_w, warn_on_full_buffer=False)
        self.children: dict[int, int] = {}
        self.owner: dict[int, socket.socket] = {}
        self.held: list[socket.socket] = []
        self.pid = os.getpid()

    def wait(self, socks: list[socket.socket], timeout: float | None) -> list[socket.socket]:
        """The sockets of ``socks`` that are readable, once any is or ``timeout`` passed;
        children that exited meanwhile are reaped."""
        fds = {s.fileno(): s for s in socks}
        ready, _, _ = select.select([*fds, self.wake_r], [], [], timeout)
        if self.wake_r in ready:
            os.read(self.wake_r, 4096)
        self.reap()
        return [fds[fd] for fd in ready if fd in fds]

    def request(self, sock: socket.socket) -> bool:
        """Answer the manager's next request on ``sock``; False: it closed the socket."""
        try:
            msg, fds, _, _ = socket.recv_fds(sock, PACKET, MAX_FDS)
        except OSError:
            msg, fds = b"", []
        if not msg:
            return False
        try:
            req = json.loads(msg)
            why = shadowed(req["code_roots"]) if req["id"] is not None else "no id"
        except (ValueError, KeyError, TypeError) as exc:
            why = f"bad request: {exc}"
        if why is not None or len(fds) != MAX_FDS:
            for fd in fds:
                os.close(fd)
            answer = {"refused": why or f"{len(fds)} fds", "id": _id(msg)}
            _send(sock, answer)
            return True
        sys.stdout.flush()
        sys.stderr.flush()
        held = [s.fileno() for s in self.held]
        keep_closed = [*held, self.wake_r, self.wake_w, *self.children.values()]
        pid = os.fork()
        if pid == 0:
            _child(req, fds, self.pid, keep_closed, self.path)
        self.children[pid] = fds[4]
        self.owner[pid] = sock
        for fd in fds[:4]:
            os.close(fd)
        _send(sock, {"pid": pid, "id": req["id"]})
        return True

    def kill_workers_of(self, sock: socket.socket) -> None:
        """The manager of ``sock`` is gone: so are the workers it asked for (process groups)."""
        for pid, owner in list(self.owner.items()):
            if owner is sock:  # the worker, and its group once it made one (setsid)
                for kill in (os.kill, os.killpg):
                    with contextlib.suppress(OSError):
                        kill(pid, signal.SIGKILL)

    def reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.deliver(pid, status)

    def deliver(self, pid: int, status: int) -> None:
        self.owner.pop(pid, None)
        fd = self.children.pop(pid, None)
        if fd is not None:
            with contextlib.suppress(OSError):
                os.write(fd, f"{status}\n".encode())
            os.close(fd)

    def drain(self) -> None:
        """Stay until the last child has exited (it dies with this process otherwise: its
        parent-death signal)."""
        signal.set_wakeup_fd(-1)
        while self.children:
            try:
                pid, status = os.waitpid(-1, 0)
            except ChildProcessError:
                break
            self.deliver(pid, status)


def _send(sock: socket.socket, answer: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):  # a manager that went away meanwhile
        sock.send(json.dumps(answer).encode())


def serve(sock: socket.socket, path: list[str]) -> None:
    """Fork a worker for each request on ``sock`` until the manager closes it."""
    server = Server(path)
    server.held.append(sock)
    while True:
        if sock in server.wait([sock], None) and not server.request(sock):
            break  # the manager is done with this zygote
    sock.close()
    server.drain()


def serve_shared(listener: socket.socket, at: str, path: list[str], idle: float) -> None:
    """Serve every manager that connects to ``listener`` (bound at ``at``) until none has been
    connected and no worker alive for ``idle`` seconds, or ``at`` is no longer its socket, or
    it could not accept a connection (it then removes ``at`` and serves those connected)."""
    server = Server(path)
    ino = os.stat(at).st_ino
    server.held.append(listener)
    idle_since = time.monotonic()
    listening = True
    while True:
        managers = [s for s in server.held if s is not listener]
        busy = bool(managers or server.children)
        if busy:
            idle_since = time.monotonic()
        left = idle - (time.monotonic() - idle_since)
        if not busy and (left <= 0 or not listening or not _still_at(at, ino)):
            break
        waited = [listener, *managers] if listening else managers
        for sock in server.wait(waited, None if busy else max(left, 0.0)):
            if sock is listener:
                try:
                    conn, _ = listener.accept()
                except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                    continue  # the manager gave up meanwhile
                except OSError:
                    # out of descriptors or the like, and the listener stays readable: stop
                    # taking managers rather than spin (those waiting to be accepted see the
                    # socket close and start another zygote), and serve those connected
                    # until they leave
                    listening = False
                    _forget(at, ino)
                    server.held.remove(listener)
                    listener.close()
                    continue
                server.held.append(conn)
                _send_raw(conn, b"ready")
            elif not server.request(sock):
                server.held.remove(sock)
                server.kill_workers_of(sock)
                sock.close()
    # a manager connecting from here on starts another zygote; one that connected meanwhile
    # sees this socket close before it said ready, and does the same
    if listening:
        _forget(at, ino)
        listener.close()
    server.drain()


def _forget(at: str, ino: int) -> None:
    """Remove ``at`` if it is still this zygote's socket."""
    if _still_at(at, ino):
        with contextlib.suppress(OSError):
            os.unlink(at)


def _send_raw(sock: socket.socket, data: bytes) -> None:
    with contextlib.suppress(OSError):
        sock.send(data)


@contextlib.contextmanager
def addressed(at: str) -> Iterator[str]:
    """``at`` as a unix socket's address: itself where it is short enough, else through a
    descriptor of its folder, ``/proc/self/fd/N/NAME`` (an address holds 107 bytes, and a
    folder in pytest's or a CI runner's temporary folder can be longer)."""
    if len(os.fsencode(at)) < 100:
        yield at
        return
    fd = os.open(os.path.dirname(at) or ".", os.O_PATH | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{fd}/{os.path.basename(at)}"
    finally:
        os.close(fd)


def _still_at(at: str, ino: int) -> bool:
    try:
        return os.stat(at).st_ino == ino
    except OSError:
        return False


def _id(msg: bytes) -> object:
    try:
        return json.loads(msg).get("id")
    except (ValueError, AttributeError):
        return None


def main(argv: list[str]) -> int:
    """``argv``: the socket's fd (a private zygote) or ``--listen PATH`` (a shared one), then
    the modules to import before forking."""
    listen = argv[0] == "--listen"
    modules = argv[2:] if listen else argv[1:]
    sock = None if listen else socket.socket(fileno=int(argv[0]))
    if not listen:
        from harness.worker.main import die_with_parent

        die_with_parent(os.environ.get("HARNESS_MANAGER_PID"))
    preimport(modules)
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        # a CUDA (or HIP) context does not survive a fork: spawn the workers instead
        print("torch initialized CUDA while importing: not forking", file=sys.stderr)
        return 1
    path = list(sys.path)
    # as the worker settles its heap after its imports: frozen here, a forked worker's first
    # collection neither walks torch's objects nor copies the pages they live in
    gc.collect()
    gc.freeze()
    # It may outlive the run whose folder holds its start-up log (a process running several):
    # from here on its workers write to their own logs, and what goes wrong in it shows as a
    # refusal that the manager writes to the log of the worker it then spawns.
    if sock is None:
        return _listen(argv[1], path)
    devnull = os.open(os.devnull, os.O_WRONLY)
    for fd in (1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
    sock.send(b"ready")
    serve(sock, path)
    return 0


def _listen(at: str, path: list[str]) -> int:
    """Bind the shared zygote's socket at ``at`` (atomically: bound beside it, then renamed
    over a stale one) and serve; its log (stdout and stderr) is the manager's to read."""
    idle = IDLE_S
    with contextlib.suppress(ValueError):
        idle = float(os.environ.get(IDLE_ENV, IDLE_S))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    tmp = f"{at}.{os.getpid()}"
    with addressed(tmp) as address:
        listener.bind(address)
    listener.listen(64)
    os.rename(tmp, at)
    print(f"[harness] zygote {os.getpid()} listening at {at}", file=sys.stderr, flush=True)
    serve_shared(listener, at, path, idle)
    return 0
