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
import os
import sys
from typing import Any

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
        "stdin",
        "stdout",
        "stderr",
        "excepthook",
        "displayhook",
        "unraisablehook",
        "breakpointhook",
        "dont_write_bytecode",
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

ModuleAttrs = list[tuple[Any, dict[str, Any]]]


def take_module_attrs() -> ModuleAttrs:
    """A copy of each watched module's namespace (those imported)."""
    mods = sys.modules
    return [(m, m.__dict__.copy()) for n in _MODULES if (m := mods.get(n)) is not None]


def restore_module_attrs(saved: ModuleAttrs, restored: list[str]) -> None:
    """Put back every attribute a target replaced or deleted on a watched module, and delete
    the ones it added (on ``builtins``, added names stay: tools add ``_`` and the like)."""
    names: list[str] = []
    for mod, before in saved:
        now = mod.__dict__
        if now == before:
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
    if names:
        restored.append(f"module attributes ({', '.join(names)})")


_GONE = object()

# -- logging -------------------------------------------------------------------------------

LoggingState = tuple[Any, ...] | None


def take_logging() -> LoggingState:
    """``logging.disable``'s level and each existing logger's level, propagation, disabled
    flag, handlers and filters (None when logging is not imported)."""
    lg = sys.modules.get("logging")
    if lg is None:
        return None
    m = lg.root.manager
    loggers = [lg.root, *(x for x in list(m.loggerDict.values()) if isinstance(x, lg.Logger))]
    return (
        m.disable,
        [(x, x.level, x.propagate, x.disabled, list(x.handlers), list(x.filters)) for x in loggers],
    )


def restore_logging(saved: LoggingState, restored: list[str]) -> None:
    """Put back what :func:`take_logging` read, for the loggers that existed then."""
    if saved is None:
        return
    lg = sys.modules["logging"]
    disable, rows = saved
    what = []
    if lg.root.manager.disable != disable:
        lg.disable(disable)
        what.append("logging.disable")
    for logger, level, propagate, disabled, handlers, filters in rows:
        if (
            logger.level != level
            or logger.propagate != propagate
            or logger.disabled != disabled
            or logger.handlers != handlers
            or logger.filters != filters
        ):
            logger.level, logger.propagate, logger.disabled = level, propagate, disabled
            logger.handlers[:] = handlers
            logger.filters[:] = filters
            what.append(logger.name)
    if what:
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

    def signature(n: int) -> tuple[Any, ...]:
        addr = var.value
        if not addr:
            return (None,)
        return (addr, *(ctypes.c_void_p * (n + 1)).from_address(addr))

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
    "restore_c_environ",
    "restore_logging",
    "restore_module_attrs",
    "take_logging",
    "take_module_attrs",
]
