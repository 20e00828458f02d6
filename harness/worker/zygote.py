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
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import importlib.util
import json
import os
import select
import signal
import socket
import sys
import traceback
from pathlib import Path
from typing import Any

MAX_FDS = 5
PACKET = 1 << 20


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


def serve(sock: socket.socket, path: list[str]) -> None:
    """Fork a worker for each request on ``sock`` until the manager closes it."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    children: dict[int, int] = {}  # pid -> the write end of its status pipe
    parent = os.getpid()
    while True:
        ready, _, _ = select.select([sock.fileno(), wake_r], [], [])
        if wake_r in ready:
            os.read(wake_r, 4096)
        _reap(children)
        if sock.fileno() not in ready:
            continue
        try:
            msg, fds, _, _ = socket.recv_fds(sock, PACKET, MAX_FDS)
        except OSError:
            msg, fds = b"", []
        if not msg:
            break  # the manager is done with this zygote
        try:
            req = json.loads(msg)
            why = shadowed(req["code_roots"]) if req["id"] is not None else "no id"
        except (ValueError, KeyError, TypeError) as exc:
            why = f"bad request: {exc}"
        if why is not None or len(fds) != MAX_FDS:
            for fd in fds:
                os.close(fd)
            answer = {"refused": why or f"{len(fds)} fds", "id": _id(msg)}
            sock.send(json.dumps(answer).encode())
            continue
        sys.stdout.flush()
        sys.stderr.flush()
        keep_closed = [sock.fileno(), wake_r, wake_w, *children.values()]
        pid = os.fork()
        if pid == 0:
            _child(req, fds, parent, keep_closed, path)
        children[pid] = fds[4]
        for fd in fds[:4]:
            os.close(fd)
        sock.send(json.dumps({"pid": pid, "id": req["id"]}).encode())
    # Its workers die with it (their parent-death signal): it stays until the last one exits.
    sock.close()
    signal.set_wakeup_fd(-1)
    while children:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        _deliver(children, pid, status)


def _id(msg: bytes) -> object:
    try:
        return json.loads(msg).get("id")
    except (ValueError, AttributeError):
        return None


def _deliver(children: dict[int, int], pid: int, status: int) -> None:
    fd = children.pop(pid, None)
    if fd is not None:
        with contextlib.suppress(OSError):
            os.write(fd, f"{status}\n".encode())
        os.close(fd)


def _reap(children: dict[int, int]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _deliver(children, pid, status)


def main(argv: list[str]) -> int:
    """``argv``: the socket's fd, then the modules to import before forking."""
    sock = socket.socket(fileno=int(argv[0]))
    from harness.worker.main import die_with_parent

    die_with_parent(os.environ.get("HARNESS_MANAGER_PID"))
    for name in argv[1:]:
        if importlib.util.find_spec(name) is not None:
            __import__(name)
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
    devnull = os.open(os.devnull, os.O_WRONLY)
    for fd in (1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
    sock.send(b"ready")
    serve(sock, path)
    return 0
