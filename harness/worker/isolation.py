"""Isolation between attempts that share a persistent worker.

:func:`isolated` snapshots the process-global state a target can reach before an attempt and
restores it after; what it cannot restore, it reports, and :meth:`Guard.apply` turns that into
a failure of the attempt that caused it (and asks the manager to replace the worker), so no
case can change the result of the case after it. What it put back is listed in the attempt's
``harness.restored`` note, what it could not in ``harness.isolation``.

Restored (read cheaply before, put back only where it changed): ``os.environ``, the working
directory, umask, locale, ``sys.path`` / ``meta_path`` / ``path_hooks``, ``sys.modules``
entries that the attempt replaced or removed, warnings filters, recursion limit, switch
interval, trace and profile functions, ``sys`` hooks and streams, gc settings, resource
limits (every RLIMIT_*), CPU affinity, niceness, the default socket timeout, the C environment
(``os.putenv``), ``logging``'s configuration and ``logging.disable``, the attributes of the
modules the harness itself calls (``time``, ``os``, ``sys``, ``json``, ...: a replaced
``time.perf_counter`` is put back), the handlers of every catchable signal and the signal mask
(faulthandler is
re-registered for SIGUSR1, which the manager needs for stack dumps, and for the fatal
signals), interval timers, numpy's error state, error callback and print options, and torch's
intra-op threads, default dtype, deterministic-algorithms mode, grad mode, float32 matmul
precision, anomaly mode, flushed denormals and its cudnn / cublas / mkldnn switches. What a
target's finalizers change while the worker collects its garbage counts as the attempt's own
(the collection runs inside the attempt's isolation, after its stages were timed).

Reported, worker replaced: file descriptors 0-2 closed or replaced (put back for the rest of
this worker's life, but whatever now owns the old numbers is lost), any other torch global
flag watched by :mod:`.knobs` that changed (inter-op threads, inference mode, mode stacks,
autocast, the sdp / precision switches: read, never written), a limit or handler that could
not be set back, and what :mod:`.leftovers` finds still running: threads, child processes
(those are killed).

Left alone, on purpose: modules the attempt really imported stay in ``sys.modules`` (removing
one is not safe, see :mod:`.imports`), and attributes a target patches on other modules than
the harness's own (:mod:`.process_state`) are not seen. Random states are not snapshotted:
every attempt reseeds Python's ``random``, numpy's legacy global RNG and torch's default
generators from its own seed before its target runs (:func:`.attempt.seed_everything`), so no
state carries over. torch and numpy are looked at only where the worker had already imported
them (a fresh-process worker stays bare); persistent workers import both before their first
attempt, unless the runner profile's ``preimport`` leaves torch out: then a persistent worker
whose attempt imported torch is replaced before the next case (never failing the case), as
what the attempt set in torch was never snapshotted.

Cost: every table is read once after an attempt and compared whole. In a worker, the state an
attempt was restored to is the next attempt's "before" (:func:`configure` with ``reuse``; the
worker's loop calls :func:`forget` when anything else ran), so only what an attempt may add to
(threads, children, finders, modules) is read before it.
"""

from __future__ import annotations

import contextlib
import faulthandler
import operator
import os
import signal
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import IO, Any

from harness.model import Attempt, ErrorInfo
from harness.worker import imports, process_state
from harness.worker.knobs import (
    INTERPRETER,
    Knob,
    Watched,
    numpy_knobs,
    put_back,
    read,
    torch_knobs,
)
from harness.worker.leftovers import Leftovers
from harness.worker.protocol import AttemptJob

# Captured at import: a target that replaces os.getpid must not fool the worker's own checks.
_getpid = os.getpid


@dataclass
class Guard:
    """What an attempt changed: ``violations`` could not be put back, ``restored`` was."""

    violations: list[str] = field(default_factory=list)
    restored: list[str] = field(default_factory=list)
    # Why the worker must be replaced although the case did nothing wrong (it never fails it).
    unsnapshotted: list[str] = field(default_factory=list)

    @property
    def replace_worker(self) -> bool:
        return bool(self.violations or self.unsnapshotted)

    def apply(self, attempt: Attempt) -> Attempt:
        """The attempt, failed with a message naming what it changed, when it changed any."""
        notes = dict(attempt.notes)
        if self.restored:
            notes["harness.restored"] = ", ".join(self.restored)
        if self.unsnapshotted and not self.violations:
            notes["harness.isolation"] = "; ".join(self.unsnapshotted)
            return replace(attempt, notes=notes)
        if not self.violations:
            return replace(attempt, notes=notes) if self.restored else attempt
        what = "; ".join(self.violations)
        notes["harness.isolation"] = what
        text = (
            f"the case changed its worker process and that cannot be undone: {what}; "
            "the worker is replaced before the next case"
        )
        if attempt.status == "passed":
            return replace(
                attempt,
                status="failed",
                error=ErrorInfo.make("IsolationViolation", text),
                notes=notes,
            )
        error = attempt.error
        if error is not None:  # keep the case's own failure (and its signature) first
            error = replace(error, message=f"{error.message}\n(also: {text})")
        return replace(attempt, error=error, notes=notes)


# -- set once by the worker's main ---------------------------------------------------------

_stackdump: IO[str] | None = None
_std_fds: dict[int, tuple[int, tuple[int, int]]] = {}  # fd -> (a private copy, identity)
_STD_NAMES = {0: "stdin", 1: "stdout", 2: "stderr"}


def _identity(fd: int) -> tuple[int, int] | None:
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def configure(*, stackdump: IO[str] | None, reuse: bool = False) -> None:
    """Called once at worker start: the faulthandler dump file to re-register after a target
    changes a signal handler, and private copies of fds 0-2 to put back a closed one.

    ``reuse``: the caller calls :func:`forget` whenever something other than an attempt ran,
    so what an attempt was restored to can serve as the next attempt's snapshot."""
    global _stackdump, _reuse
    _stackdump = stackdump
    _reuse = reuse
    for fd in (0, 1, 2):
        ident = _identity(fd)
        if ident is not None:
            _std_fds[fd] = (os.dup(fd), ident)


_SIGNALS = tuple(
    int(s) for s in signal.valid_signals() if s not in (signal.SIGKILL, signal.SIGSTOP)
)
_FATAL = frozenset(
    int(getattr(signal, n)) for n in ("SIGSEGV", "SIGFPE", "SIGABRT", "SIGBUS", "SIGILL")
)
_TIMERS = tuple(
    getattr(signal, n)
    for n in ("ITIMER_REAL", "ITIMER_VIRTUAL", "ITIMER_PROF")
    if hasattr(signal, n)
)

try:
    import _signal  # the C functions: the wrappers in signal.py cost 20x more per call

    _getsignal: Callable[[int], Any] = _signal.getsignal
    _setsignal: Callable[[int, Any], Any] = _signal.signal
    _sigmask: Callable[[int, Any], Any] = _signal.pthread_sigmask
except ImportError:  # pragma: no cover - CPython always has it
    _getsignal, _setsignal, _sigmask = signal.getsignal, signal.signal, signal.pthread_sigmask


# -- one snapshot ------------------------------------------------------------------------------


@dataclass
class _Snapshot:
    pid: int
    leftovers: Leftovers
    env: dict[Any, Any]
    knobs: list[Any]
    lists: list[tuple[list[Any], list[Any]]]
    modules: dict[str, Any]
    modules_version: int | None
    filters: tuple[Any, list[Any]]
    signals: list[Any]
    mask: set[int]
    fds: dict[int, tuple[int, int] | None]
    extra: tuple[Knob, ...]  # numpy's and torch's, for the modules already imported
    extra_saved: list[Any]
    watched: tuple[Watched, ...]
    watched_saved: list[Any]
    tables: tuple[object, object]  # numpy's and torch's tables, to tell when one appeared
    module_attrs: process_state.ModuleAttrs = field(default_factory=list)
    logging: process_state.LoggingState = None


def _environ() -> dict[Any, Any]:
    data = getattr(os.environ, "_data", None)  # the encoded dict: copying it is 100x cheaper
    return dict(data) if isinstance(data, dict) else dict(os.environ)


_reuse = False
_last: _Snapshot | None = None  # what the last attempt was restored to, when reusable


_pending: _Snapshot | None = None  # the next attempt's snapshot, taken ahead (prepare)


def forget() -> None:
    """Something other than an attempt ran: read everything afresh before the next one."""
    global _last, _pending
    _last = _pending = None


# The long-lived tables of the last snapshot the worker froze (see :func:`unfrozen_tables`).
_frozen_tables: tuple[object, ...] = ()


def _tables(snap: _Snapshot) -> tuple[object, ...]:
    """A snapshot's tables that later snapshots share while nothing changes them: the copies of
    the environment, ``sys.modules`` and the watched modules' namespaces, the loggers' states,
    the settings read (several thousand references in all, with torch imported)."""
    return (
        snap.env,
        snap.knobs,
        snap.modules,
        snap.module_attrs,
        snap.logging,
        snap.signals,
        snap.extra_saved,
        snap.watched_saved,
    )


def unfrozen_tables() -> bool:
    """Whether the snapshot taken ahead (:func:`prepare`) holds tables made since the worker
    last froze its heap (:func:`tables_frozen`). They live as long as nothing changes what
    they copy, and every full collection walked them: ~90 us after each trivial attempt, of
    ~200 (the worker freezes them instead)."""
    snap = _pending
    if snap is None:
        return False
    now = _tables(snap)
    return len(now) != len(_frozen_tables) or any(
        a is not b for a, b in zip(now, _frozen_tables, strict=True)
    )


def tables_frozen() -> None:
    """The worker froze its heap (``gc.freeze``) with the snapshot taken ahead alive."""
    global _frozen_tables
    _frozen_tables = _tables(_pending) if _pending is not None else ()


def prepare() -> None:
    """Take the next attempt's snapshot now, while the worker waits for its request (after
    it answered the last one, while the manager records that answer): nothing runs in the
    worker between now and that attempt but reading and decoding its request, so the state
    is the same. The caller calls :func:`forget` if anything else runs first."""
    global _pending
    _pending = _take() if _reuse else None


def _take() -> _Snapshot:
    last, tables = _last, (numpy_knobs(), torch_knobs())
    if last is not None and last.pid == _getpid() and all(map(operator.is_, last.tables, tables)):
        # Restored to exactly this; only what an attempt may add to is read again.
        return replace(
            last,
            leftovers=Leftovers.take(),
            lists=imports.lists(),
            modules=imports.modules(),
            modules_version=imports.modules_version(),
            module_attrs=process_state.refresh_module_attrs(last.module_attrs),
            logging=process_state.refresh_logging(last.logging),
        )
    torch_restored, watched = torch_knobs()
    extra = numpy_knobs() + torch_restored
    return _Snapshot(
        pid=_getpid(),
        leftovers=Leftovers.take(),
        env=_environ(),
        knobs=read(INTERPRETER),
        lists=imports.lists(),
        modules=imports.modules(),
        modules_version=imports.modules_version(),
        filters=(warnings.filters, list(warnings.filters)),
        signals=list(map(_getsignal, _SIGNALS)),
        mask=set(_sigmask(signal.SIG_BLOCK, ())),
        fds={fd: _std_fds[fd][1] if fd in _std_fds else _identity(fd) for fd in (0, 1, 2)},
        extra=extra,
        extra_saved=read(extra),
        watched=watched,
        watched_saved=read(watched),
        tables=tables,
        module_attrs=process_state.take_module_attrs(),
        logging=process_state.take_logging(),
    )


def _restore_env(saved: dict[Any, Any], guard: Guard) -> None:
    if _environ() == saved:
        return
    want = {os.fsdecode(k): os.fsdecode(v) for k, v in saved.items()}
    now = dict(os.environ)
    for k in now.keys() - want.keys():
        del os.environ[k]
    for k, v in want.items():
        if now.get(k) != v:
            os.environ[k] = v
    if now.get("TZ") != want.get("TZ"):
        time.tzset()
    changed = sorted(k for k in now.keys() | want.keys() if now.get(k) != want.get(k))
    guard.restored.append(f"os.environ ({', '.join(changed)})")


def _restore_warnings(saved: tuple[Any, list[Any]], guard: Guard) -> None:
    obj, items = saved
    if warnings.filters is not obj or obj != items:
        warnings.filters = obj
        obj[:] = items
        guard.restored.append("warnings filters")
    # Every attempt sees a warning as if for the first time ("default" and "once" actions).
    warnings._filters_mutated()  # type: ignore[attr-defined]
    with contextlib.suppress(AttributeError):
        warnings.onceregistry.clear()  # type: ignore[attr-defined]


def _signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:  # a real-time signal between SIGRTMIN and SIGRTMAX
        return f"signal {sig}"


def _restore_signals(snap: _Snapshot, guard: Guard) -> None:
    changed = []
    now = list(map(_getsignal, _SIGNALS))
    if now != snap.signals:  # the usual case is this one comparison (identical, else equal)
        for sig, before, handler in zip(_SIGNALS, snap.signals, now, strict=True):
            if handler is before or handler == before:
                continue
            name = _signal_name(sig)
            if before is None:  # installed by C code, not from Python: cannot be put back
                guard.violations.append(f"the handler of {name} changed and cannot be set back")
                continue
            _setsignal(sig, before)
            changed.append(sig)
            guard.restored.append(f"the {name} handler")
    if _stackdump is not None:
        usr1 = int(signal.SIGUSR1)
        if usr1 in changed:  # signal.signal() replaced faulthandler's C handler: install it again
            faulthandler.unregister(usr1)
            faulthandler.register(usr1, file=_stackdump, all_threads=True)
        if _FATAL.intersection(changed) or not faulthandler.is_enabled():
            faulthandler.disable()
            faulthandler.enable(file=_stackdump, all_threads=True)
    faulthandler.cancel_dump_traceback_later()
    mask = set(_sigmask(signal.SIG_BLOCK, ()))
    if mask != snap.mask:
        _sigmask(signal.SIG_SETMASK, snap.mask)
        guard.restored.append("the signal mask")
    for which in _TIMERS:
        if signal.getitimer(which) != (0.0, 0.0):
            signal.setitimer(which, 0)
            guard.restored.append("a pending interval timer (signal.alarm/setitimer)")


def _restore_fds(snap: _Snapshot, guard: Guard) -> None:
    for fd, before in snap.fds.items():
        now = _identity(fd)
        if now == before or before is None:
            continue
        how = "closed" if now is None else "replaced (os.dup2 or close and reopen)"
        if fd in _std_fds:
            os.dup2(_std_fds[fd][0], fd)
        guard.violations.append(f"file descriptor {fd} ({_STD_NAMES[fd]}) was {how}")


def _check_watched(snap: _Snapshot, guard: Guard) -> None:
    now = read(snap.watched)
    if now == snap.watched_saved:
        return
    for (label, _), before, value in zip(snap.watched, snap.watched_saved, now, strict=True):
        if value != before:
            guard.violations.append(f"{label} changed from {before!r} to {value!r}")


def _restore(snap: _Snapshot, guard: Guard) -> None:
    lists = (guard.restored, guard.violations)
    steps: tuple[tuple[str, Callable[[], None]], ...] = (
        ("threads and child processes", lambda: guard.violations.extend(snap.leftovers.find())),
        (
            "module attributes",
            lambda: process_state.restore_module_attrs(snap.module_attrs, guard.restored),
        ),
        ("file descriptors 0-2", lambda: _restore_fds(snap, guard)),
        ("the environment", lambda: _restore_env(snap.env, guard)),
        ("the C environment", lambda: process_state.restore_c_environ(guard.restored)),
        ("logging", lambda: process_state.restore_logging(snap.logging, guard.restored)),
        ("interpreter settings", lambda: put_back(INTERPRETER, snap.knobs, *lists)),
        ("import paths", lambda: imports.restore_lists(snap.lists, guard.restored)),
        (
            "sys.modules",
            lambda: imports.restore_modules(snap.modules, snap.modules_version, guard.restored),
        ),
        ("warnings", lambda: _restore_warnings(snap.filters, guard)),
        ("signals", lambda: _restore_signals(snap, guard)),
        ("numpy and torch settings", lambda: put_back(snap.extra, snap.extra_saved, *lists)),
        ("torch global flags", lambda: _check_watched(snap, guard)),
    )
    for what, step in steps:
        try:
            step()
        except Exception as exc:  # never let one step keep the others from running
            guard.violations.append(f"{what} could not be checked ({type(exc).__name__}: {exc})")


@contextlib.contextmanager
def isolated(job: AttemptJob | None = None) -> Iterator[Guard]:
    """Snapshot before, restore after, record what cannot be restored.

    In a child that a target forked and that returned from it, the exit does nothing: that
    process is not the worker and exits at once (:mod:`.main`).
    """
    global _last, _pending
    guard = Guard()
    snap = _pending if _pending is not None and _pending.pid == _getpid() else _take()
    _pending = None
    try:
        yield guard
    finally:
        if _getpid() == snap.pid:
            _restore(snap, guard)
            persistent = job is not None and not job.case.fresh_process
            if persistent and snap.tables[1] == ((), ()) and torch_knobs()[0]:
                # torch arrived during the attempt (a runner profile whose preimport leaves it
                # out): what the case set in it was never snapshotted, so cannot be put back
                guard.unsnapshotted.append(
                    "the case imported torch, which this worker had not imported before it "
                    "(the runner profile's preimport leaves torch out): torch's settings "
                    "cannot be put back, so the next case gets a fresh worker"
                )
            _last = snap if _reuse and not guard.replace_worker else None


__all__ = [
    "Guard",
    "configure",
    "forget",
    "isolated",
    "prepare",
    "tables_frozen",
    "unfrozen_tables",
]
