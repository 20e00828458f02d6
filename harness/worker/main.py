"""The worker process: ``python -m harness.worker``.

It reads one request per line on stdin and answers one line on a private copy of the original
stdout (:mod:`harness.worker.protocol`); the target's own prints go to the worker's log, never
into the protocol, and targets read ``/dev/null`` as their stdin. It imports targets once and
runs attempts back to back, each inside :func:`harness.worker.isolation.isolated`, so no case
can change the process the next one runs in. ``faulthandler`` writes the stacks of all threads
to a dump file on a fatal signal and on SIGUSR1, which the manager sends before it kills a
worker whose attempt ran past its timeout.

A child forked by a target inherits this loop; :func:`os.register_at_fork` closes its copy of
the protocol, and a child that returns from the target exits at once instead of answering.
The worker is a child subreaper (Linux), so a daemon that a case double-forks is reparented to
it and found, killed and reported against that case by :mod:`harness.worker.leftovers`.
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import gc
import mmap
import os
import signal
import sys
import traceback
from contextlib import ExitStack
from pathlib import Path
from typing import IO, Any

from harness.worker import protocol as p
from harness.worker.imports import preimport
from harness.worker.isolation import configure as configure_isolation
from harness.worker.isolation import forget as forget_snapshot
from harness.worker.isolation import isolated, tables_frozen, unfrozen_tables
from harness.worker.isolation import prepare as prepare_snapshot
from harness.worker.leftovers import become_subreaper

# Captured at import: a target that replaces os.getpid must not fool the worker's own checks.
_getpid = os.getpid

_WORKER_PID = _getpid()
_proto_fd: int | None = None


def _in_forked_child() -> bool:
    return _getpid() != _WORKER_PID


def _close_protocol_in_child() -> None:
    # Runs in every child forked from the worker: it must never speak for the worker.
    global _proto_fd
    if _proto_fd is not None:
        with contextlib.suppress(OSError):
            os.close(_proto_fd)
        _proto_fd = None


# The reply key, in a page that a fork hands the child zeroed (MADV_WIPEONFORK) or not at all
# (MADV_DONTFORK); None where the manager gave none.
_reply_key: memoryview | None = None
_MADV_WIPEONFORK = 18  # Linux >= 4.14; not every Python's mmap names it


def _load_reply_key() -> memoryview | None:
    """Read the key the manager wrote into the pipe named by ``HARNESS_REPLY_KEY_FD`` straight
    into a private page (no Python object ever holds it), then close the pipe."""
    fd = os.environ.pop("HARNESS_REPLY_KEY_FD", None)
    if fd is None:
        return None
    page = mmap.mmap(-1, mmap.PAGESIZE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    for advice in (getattr(mmap, "MADV_WIPEONFORK", _MADV_WIPEONFORK), mmap.MADV_DONTFORK):
        try:
            page.madvise(advice)
            break
        except (OSError, ValueError, AttributeError):
            continue
    try:
        n = os.readv(int(fd), [page])
    finally:
        os.close(int(fd))
    return memoryview(page)[:n]


def _answer(out: IO[str], msg: p.Reply) -> None:
    if _in_forked_child():
        os._exit(0)
    key = None
    if _reply_key is not None:
        key = p.sign(_reply_key, str(getattr(msg, "nonce", "") or ""))
    out.write(p.encode(msg, key=key))
    out.flush()


def _handle(msg: p.Request) -> p.Reply:
    pid = _getpid()
    if isinstance(msg, p.AttemptRequest):
        modules = len(sys.modules)
        from harness.worker.attempt import run_attempt

        covered: dict[str, Any] | None = None
        _heap.coverage = msg.job.coverage is not None
        with ExitStack() as stack:
            if msg.job.coverage is not None:
                # Outside the isolation: the tracer is on before its snapshot and after its
                # check, so it reads as no change of the process's state (the snapshot taken
                # ahead, before the tracer, is dropped).
                from harness.worker.coverage import measure

                forget_snapshot()

                covered = stack.enter_context(measure(msg.job.coverage))
                modules = len(sys.modules)
            with isolated(msg.job) as guard:
                attempt = run_attempt(msg.job)
                if _in_forked_child():
                    os._exit(0)  # a target forked and this is the child returning: never answer
                # Inside the isolation: what the target's finalizers (__del__, weakref.finalize)
                # change while its garbage is collected is put back, or fails this case.
                gc.collect()
            # frozen once answered, with the isolation's new copy of sys.modules (_freeze_heap)
            _heap.imported = _heap.imported or len(sys.modules) > modules
        attempt = guard.apply(attempt)
        return p.AttemptReply(
            nonce=msg.nonce,
            pid=pid,
            case_id=msg.job.case.id,
            index=msg.job.index,
            attempt=attempt.to_json(),
            replace_worker=guard.replace_worker,
            coverage=covered,
        )
    # A probe asks torch only where it must (a CUDA, ROCm or XPU build, for its devices); where
    # that imports torch into a worker whose profile leaves it out, the next case must not find
    # it there: the reply says to replace the worker.
    had_torch = "torch" in sys.modules
    if isinstance(msg, p.PlatformRequest):
        from harness.platforms import check, resolve_identity

        available, detail = check(msg.platform)
        identity = resolve_identity(msg.platform, msg.arch).to_json()
        return p.PlatformReply(
            msg.nonce,
            pid,
            available,
            detail,
            identity=identity,
            replace_worker=not had_torch and "torch" in sys.modules,
        )
    if isinstance(msg, p.EnvRequest):
        from harness.worker.envinfo import collect_env

        root = Path(msg.code_root) if msg.code_root else None
        env = collect_env(root)
        return p.EnvReply(
            msg.nonce, pid, env, replace_worker=not had_torch and "torch" in sys.modules
        )
    raise p.ProtocolError(f"unexpected request {msg!r}")


def main(argv: list[str] | None = None, *, parent_pid: int | None = None) -> int:
    """The worker's loop; ``parent_pid``: the zygote it was forked from, when it was
    (:mod:`harness.worker.zygote`), else the manager started it."""
    global _WORKER_PID, _proto_fd, _reply_key
    parser = argparse.ArgumentParser(prog="python -m harness.worker")
    parser.add_argument("--stackdump", required=True, help="file for faulthandler stack dumps")
    parser.add_argument(
        "--preimport", action="append", default=[], help="module to import at start-up (e.g. torch)"
    )
    args = parser.parse_args(argv)
    _WORKER_PID = _getpid()
    _reply_key = _load_reply_key()

    _proto_fd = os.dup(1)
    proto = os.fdopen(_proto_fd, "w", buffering=1, encoding="utf-8", closefd=False)
    requests = os.fdopen(os.dup(0), "r", encoding="utf-8")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # targets read /dev/null, never the protocol
    os.close(devnull)
    os.dup2(2, 1)  # stray prints from the code under test land in the log, not the protocol
    os.register_at_fork(after_in_child=_close_protocol_in_child)
    dump = open(args.stackdump, "a", buffering=1)  # noqa: SIM115 - lives as long as the process
    faulthandler.enable(file=dump, all_threads=True)
    faulthandler.register(signal.SIGUSR1, file=dump, all_threads=True)
    # The manager owns interruption: a Ctrl-C in the terminal must not kill a half-done attempt.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent(str(parent_pid) if parent_pid else os.environ.get("HARNESS_MANAGER_PID"))
    become_subreaper()
    configure_isolation(stackdump=dump, reuse=True)
    preimport(args.preimport)
    threads = os.environ.get("HARNESS_THREADS")
    if threads and "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(int(threads))
    _settle_heap()
    _answer(proto, p.Ready(pid=_getpid()))
    for line in requests:
        if not line.strip():
            continue
        nonce = ""
        try:
            msg = p.decode_request(line)
            nonce = msg.nonce
            if isinstance(msg, p.ExitRequest):
                break
            reply = _handle(msg)
            if not isinstance(reply, p.AttemptReply):
                forget_snapshot()  # something else ran: the next attempt reads all afresh
                _settle_heap()  # the environment and platform probes import a lot, once
        except (Exception, KeyboardInterrupt, SystemExit) as exc:  # a bug of the harness itself
            forget_snapshot()
            reply = p.ErrorReply(
                nonce, _getpid(), f"{type(exc).__name__}: {exc}", traceback.format_exc()
            )
        try:
            _answer(proto, reply)
        except ValueError as exc:  # e.g. an unserializable value: never let the protocol break
            forget_snapshot()
            _answer(proto, p.ErrorReply(nonce, _getpid(), f"unserializable reply: {exc}"))
            continue
        if isinstance(reply, p.AttemptReply) and not reply.replace_worker:
            # while the manager records this answer: the next attempt's snapshot
            try:
                prepare_snapshot()
            except Exception:  # read again, in full, when the next attempt starts
                forget_snapshot()
            # (a coverage attempt reads its snapshot afresh, so each leaves new tables: its
            # leftovers are not frozen for them)
            if _heap.imported or (not _heap.coverage and unfrozen_tables()):
                _freeze_heap()
    pool = sys.modules.get("harness.worker.server_pool")
    if pool is not None:  # servers that cases shared and no case marked as done with
        try:
            pool.stop_all()
        finally:
            sys.stderr.flush()
            os._exit(0)  # the manager waits for this exit: skip torch's slow teardown
    return 0


class _Heap:
    """Whether an attempt imported modules since the worker last froze its heap, and whether
    the last attempt ran under coverage."""

    imported = False
    coverage = False


_heap = _Heap()


def _freeze_heap() -> None:
    """Freeze the heap after an attempt that imported modules (a target's first, which imports
    its stack), or whose answer left the next attempt's snapshot with tables not frozen yet.
    What survived the attempt's full collection, which ran inside its isolation (so that what
    finalizers change is put back like the target's own changes; the stages were timed
    already), is frozen as :func:`_settle_heap` does at start-up. Targets leave reference
    cycles behind (a diffusers pipeline's modules are one: ~220 of them per build), which only
    the cyclic collector frees; left to the collector's own schedule, a full collection lands
    inside some later attempt, timed as that case's stages and paid for the garbage of the
    cases before it. So every attempt is followed by a full collection that walks only the
    last attempt's leftovers and what the worker made since it last froze.

    diffusers and transformers bring ~260,000 objects, and walking them made every later
    collection take 160-230 ms. The freeze also keeps what that attempt left alive besides its
    imports (caches it filled) out of the collector's reach for good, so a cycle among those
    that dies later is never freed; the leftovers of an attempt that did neither (most
    attempts, and every coverage attempt that imported nothing: each reads its snapshot
    afresh) are not frozen, as what an attempt leaves alive may die later. It runs once the
    attempt is answered and the next attempt's snapshot is taken, so that the snapshot's
    tables (the copy of the grown ``sys.modules``, ~1,300 entries with torch, the watched
    modules' namespaces, the loggers' states: several thousand references) are frozen too;
    walked by the full collection after every attempt, they cost ~90 us of the ~200 it took
    after a trivial one."""
    gc.freeze()
    tables_frozen()
    _heap.imported = False


def _settle_heap() -> None:
    """Collect once, take the next attempt's snapshot, and freeze what survives (torch, numpy,
    the harness, what the probes imported, the snapshot's tables), so that the cyclic
    collector never walks it again. A full collection with torch loaded takes ~0.1 s; one that
    lands inside an attempt is timed as that case's latency and paid for garbage the cases
    before it left. Runs between attempts only."""
    gc.collect()
    try:
        prepare_snapshot()
    except Exception:  # read again, in full, when the next attempt starts
        forget_snapshot()
    _freeze_heap()


def die_with_parent(parent: str | None) -> None:
    """On Linux, ask the kernel to SIGKILL this process when its parent (pid ``parent``: the
    manager, or the zygote that forked it) dies."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL)
    except (OSError, AttributeError):
        return
    if parent and os.getppid() != int(parent):  # the parent died before prctl took effect
        os._exit(1)


if __name__ == "__main__":
    sys.exit(main())
