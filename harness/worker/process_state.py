"""Process state that :mod:`.isolation` checks around every attempt beyond its knob tables:
the attributes of the modules the harness itself calls (a target that replaces
``time.perf_counter`` would make every later stage read 0.0 s), ``logging``'s configuration,
and the C environment (``os.putenv`` and ``setenv`` through ctypes bypass ``os.environ``).

Each ``take_*`` reads the state cheaply; each ``restore_*`` puts back what changed and names it
in ``restored``. Nothing here imports a module the process has not imported (``logging`` is
looked at only when it is in ``sys.modules``).
"""

from __future__ import annotations

import contextlib
import operator
import os
import sys
from typing import Any

from harness.worker.imports import version_cell
from harness.worker.knobs import SYS_KNOBS

# Modules whose functions the harness calls in the worker between and around attempts (clocks,
# pids, pipes, JSON, signals, threads, processes); builtins for open/print.
_MODULES = (
    "builtins",
    "time",
    "os",
    "posixpath",
    "sys",
    "gc",
    "json",
    "signal",
    "threading",
    "subprocess",
    "select",
    "faulthandler",
    "traceback",
    "socket",
)
# sys attributes that are restored by the knob tables and imports (under their own labels), or
# that the interpreter itself sets.
_SYS_OWN = frozenset(
    (
        *SYS_KNOBS,
        "path",
        "meta_path",
        "path_hooks",
        "modules",
        "path_importer_cache",
        "last_type",
        "last_value",
        "last_traceback",
        "last_exc",
        "ps1",
        "ps2",
    )
)

# [module, a copy of its namespace, the namespace's version tag (None: not readable), the
# cell that reads the tag (imports.version_cell; the module keeps its namespace alive)]
ModuleAttrs = list[list[Any]]


def _version(cell: Any) -> int | None:
    return int(cell.value) if cell is not None else None


def take_module_attrs() -> ModuleAttrs:
    """A copy of each watched module's namespace (those imported), with its version tag."""
    mods = sys.modules
    out = []
    for n in _MODULES:
        m = mods.get(n)
        if m is not None:
            cell = version_cell(m.__dict__)
            out.append([m, m.__dict__.copy(), _version(cell), cell])
    return out


def refresh_module_attrs(saved: ModuleAttrs) -> ModuleAttrs:
    """``saved`` again when the process was restored to it and no watched module was imported
    since; else a new :func:`take_module_attrs`."""
    mods = sys.modules
    if len(saved) == sum(n in mods for n in _MODULES):
        return saved
    return take_module_attrs()


def restore_module_attrs(saved: ModuleAttrs, restored: list[str]) -> None:
    """Put back every attribute a target replaced or deleted on a watched module, and delete
    the ones it added (on ``builtins``, added names stay: tools add ``_`` and the like). A
    namespace whose version tag did not move was not written to and is not compared."""
    names: list[str] = []
    for entry in saved:
        mod, before, version, cell = entry
        if version is not None and _version(cell) == version:
            continue
        now = mod.__dict__
        if now == before:
            entry[2] = _version(cell)
            continue
        name = mod.__name__
        changed = [
            k
            for k, v in before.items()
            if now.get(k, _GONE) is not v and not (name == "sys" and k in _SYS_OWN)
        ]
        added = [] if name == "builtins" else [k for k in now.keys() - before.keys()]
        if name == "sys":
            added = [k for k in added if k not in _SYS_OWN]
        for k in changed:
            now[k] = before[k]
        for k in added:
            del now[k]
        names += (f"{name}.{k}" for k in changed + added)
        entry[2] = _version(cell)
    if names:
        restored.append(f"module attributes ({', '.join(names)})")


_GONE = object()

# -- logging -------------------------------------------------------------------------------

# (logging.disable's level, the size of the logger table, the loggers, and each one's
# (level, propagate, disabled, handlers, filters) with copies of its handler and filter
# lists), or None when logging is not imported. The check after every attempt is one C-level
# pass over the loggers (a stack has ~100-300) and one comparison: each logger's live lists
# compare equal to the copies while they hold the same handlers and filters, in order.
LoggingState = tuple[Any, ...] | None
_STATE = operator.attrgetter("level", "propagate", "disabled", "handlers", "filters")


def _loggers(lg: Any) -> list[Any]:
    m = lg.root.manager
    return [lg.root, *(x for x in list(m.loggerDict.values()) if isinstance(x, lg.Logger))]


def take_logging() -> LoggingState:
    """``logging.disable``'s level and each existing logger's level, propagation, disabled
    flag, handlers and filters."""
    lg = sys.modules.get("logging")
    if lg is None:
        return None
    loggers = _loggers(lg)
    states = [(*x[:3], list(x[3]), list(x[4])) for x in map(_STATE, loggers)]
    return lg.root.manager.disable, len(lg.root.manager.loggerDict), loggers, states


def refresh_logging(saved: LoggingState) -> LoggingState:
    """``saved`` again when the process was restored to it and no logger was made since."""
    lg = sys.modules.get("logging")
    if lg is None or saved is None or saved[1] != len(lg.root.manager.loggerDict):
        return take_logging()
    return saved


def restore_logging(saved: LoggingState, restored: list[str]) -> None:
    """Put back what :func:`take_logging` read, for the loggers that existed then."""
    if saved is None:
        return
    lg = sys.modules["logging"]
    disable, _, loggers, states = saved
    now = list(map(_STATE, loggers))
    if lg.root.manager.disable == disable and now == states:
        return
    what = []
    if lg.root.manager.disable != disable:
        lg.disable(disable)
        what.append("logging.disable")
    for logger, state, before in zip(loggers, now, states, strict=True):
        if state != before:
            logger.level, logger.propagate, logger.disabled, hs, fs = before
            logger.handlers[:] = hs
            logger.filters[:] = fs
            what.append(logger.name)
    with contextlib.suppress(AttributeError):
        lg.root.manager._clear_cache()
    restored.append(f"logging configuration ({', '.join(what)})")


# -- the C environment ---------------------------------------------------------------------


def _environ_reader() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        var = ctypes.c_void_p.in_dll(libc, "environ")
    except (OSError, ValueError, AttributeError):
        return None

    size = ctypes.sizeof(ctypes.c_void_p)

    def signature(n: int) -> tuple[Any, ...]:
        addr = var.value  # the pointers of n entries and the terminator, as bytes
        return (addr, ctypes.string_at(addr, size * (n + 1)) if addr else b"")

    def decode() -> dict[bytes, bytes]:
        out: dict[bytes, bytes] = {}
        if not var.value:  # clearenv() leaves no array at all
            return out
        arr = ctypes.cast(var.value, ctypes.POINTER(ctypes.c_char_p))
        i = 0
        while (entry := arr[i]) is not None:
            key, _, value = entry.partition(b"=")
            out.setdefault(key, value)
            i += 1
        return out

    return signature, decode


_reader = _environ_reader()
_signature: tuple[Any, ...] | None = None


def _data() -> dict[bytes, bytes]:
    data = getattr(os.environ, "_data", None)
    return data if isinstance(data, dict) else {}


def restore_c_environ(restored: list[str]) -> None:
    """Make the C environment (what child processes and C libraries read) match
    ``os.environ`` again, after ``os.environ`` itself was put back. Read in full only when the
    pointers of ``environ`` changed since the last look."""
    global _signature
    if _reader is None:
        return
    signature, decode = _reader
    want = _data()
    sig = signature(len(want))
    if sig == _signature:
        return
    now = decode()
    if now != want:
        names = sorted({*now, *want} - {k for k in now.keys() & want.keys() if now[k] == want[k]})
        for key in names:
            if key in want:
                os.putenv(key, want[key])
            else:
                os.unsetenv(key)
        restored.append(
            f"the C environment (os.putenv: {', '.join(os.fsdecode(k) for k in names)})"
        )
    _signature = signature(len(want))


__all__ = [
    "refresh_logging",
    "refresh_module_attrs",
    "restore_c_environ",
    "restore_logging",
    "restore_module_attrs",
    "take_logging",
    "take_module_attrs",
]
