"""The import system's state between attempts: ``sys.modules``, ``sys.path``, ``sys.meta_path``
and ``sys.path_hooks``, as :mod:`.isolation` snapshots and restores it.

``sys.path`` is put back as it was. Finders and hooks that were there come back; ones a module
registered while it was imported stay (that module stays too). In ``sys.modules``, entries an
attempt replaced or removed come back (with the parent package's attribute), and entries it
added that are no module at all (a mock, an object, ``None``) go; modules it really imported
stay, since removing them is not safe (extension modules such as torch's cannot be imported
twice, and the modules imported alongside hold references to them). A module object made by
hand stays too: it cannot be told from a library's own (Cython keeps its shared types in one,
``_cython_3_2_4``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
import types
from collections.abc import Callable, Iterable
from typing import Any

_LISTS = ("path", "meta_path", "path_hooks")
_MISSING = object()
# Before a module name a worker imports at start-up: import it only where that succeeds.
WHERE_IT_IMPORTS = "?"


def preimport(names: Iterable[str]) -> None:
    """Import ``names`` at a worker's (or its zygote's) start-up, each one this interpreter can
    find. A name marked :data:`WHERE_IT_IMPORTS` (a module a case requires) is imported only
    where its import succeeds: an error it raises is the case's to raise, when its attempt
    imports it, and to be reported there as the case's error, not as a worker that failed to
    start."""
    for entry in names:
        name = entry.removeprefix(WHERE_IT_IMPORTS)
        if name == entry:
            if importlib.util.find_spec(name) is not None:
                __import__(name)
            continue
        # (find_spec of ``pkg.sub`` imports ``pkg``, and raises when there is none)
        with contextlib.suppress(Exception):  # the case's to raise or be skipped on
            if importlib.util.find_spec(name) is not None:
                __import__(name)


def lists() -> list[tuple[list[Any], list[Any]]]:
    """``sys.path``, ``sys.meta_path`` and ``sys.path_hooks``: each object and its items."""
    return [(getattr(sys, n), list(getattr(sys, n))) for n in _LISTS]


def restore_lists(saved: list[tuple[list[Any], list[Any]]], restored: list[str]) -> None:
    """``sys.path`` as it was; the finders and hooks that were there back in their places."""
    for name, (obj, items) in zip(_LISTS, saved, strict=True):
        if getattr(sys, name) is not obj:
            setattr(sys, name, obj)
        if obj == items:
            continue
        if name == "path":
            obj[:] = items
        else:  # finders a module registered at import stay; the ones that were there come back
            obj[:] = [x for x in obj if x not in items] + items
        restored.append(f"sys.{name}")


def _dict_version_reader() -> Callable[[dict[str, Any]], int] | None:
    """CPython 3.11-3.13 keep a version tag in every dict (PEP 509) that changes with each
    write: reading it tells "sys.modules was not written" without touching its ~1,000 module
    objects (comparing them costs ~0.2 ms an attempt in cache misses alone). The layout is
    checked on a scratch dict first; where it does not hold (3.14, a debug or free-threaded
    build), None, and sys.modules is compared entry by entry."""
    if sys.implementation.name != "cpython" or not (3, 11) <= sys.version_info[:2] <= (3, 13):
        return None
    try:
        import ctypes
        import sysconfig

        if sysconfig.get_config_var("Py_GIL_DISABLED") or hasattr(sys, "gettotalrefcount"):
            return None
        offset = 3 * ctypes.sizeof(ctypes.c_ssize_t)  # after ob_refcnt, ob_type, ma_used

        def version(d: dict[str, Any]) -> int:
            return int(ctypes.c_uint64.from_address(id(d) + offset).value)

        d = {"a": 1}
        v0 = version(d)
        _ = d["a"], len(d), list(d)
        v1 = version(d)
        d["a"] = 2
        v2 = version(d)
        d["b"] = 3
        v3 = version(d)
        del d["b"]
        v4 = version(d)
    except Exception:
        return None
    return version if v0 == v1 and len({v1, v2, v3, v4}) == 4 else None


_dict_version = _dict_version_reader()
dict_version = _dict_version  # for the other tables that check a dict cheaply


def version_cell(d: dict[str, Any]) -> Any:
    """An object whose ``value`` is ``d``'s version tag at each read (None where tags cannot
    be read): ~0.2 us a read against ~1.5 us for :func:`dict_version`, which makes a new
    ctypes object per call. Valid only while ``d`` lives: the caller keeps ``d`` alive."""
    if _dict_version is None:
        return None
    import ctypes

    return ctypes.c_uint64.from_address(id(d) + 3 * ctypes.sizeof(ctypes.c_ssize_t))


_modules_cell: tuple[dict[str, Any], Any] | None = None


def modules_version() -> int | None:
    """The version tag of ``sys.modules`` (None where it cannot be read)."""
    global _modules_cell
    if _dict_version is None:
        return None
    mods = sys.modules
    if _modules_cell is None or _modules_cell[0] is not mods:  # (held: the cell stays valid)
        _modules_cell = (mods, version_cell(mods))
    return int(_modules_cell[1].value)


# sys.modules as the last attempt left it, and its version then. Between attempts the worker
# itself only adds modules, which takes a new copy; so does any import during an attempt.
_modules_seen: dict[str, Any] = {}
_modules_seen_version: int | None = -1


def modules() -> dict[str, Any]:
    """A copy of ``sys.modules`` (the one kept from the last attempt, when still current)."""
    global _modules_seen, _modules_seen_version
    version = modules_version()
    if len(sys.modules) != len(_modules_seen) or version != _modules_seen_version:
        _modules_seen, _modules_seen_version = sys.modules.copy(), version
    return _modules_seen


def restore_modules(saved: dict[str, Any], version: int | None, restored: list[str]) -> None:
    """Put back the entries of ``sys.modules`` an attempt replaced or removed, and drop the
    entries it added that are no module at all; modules it really imported stay."""
    global _modules_seen, _modules_seen_version
    mods = sys.modules
    if version is not None and modules_version() == version:
        return  # not written to at all
    if len(mods) == len(saved) and mods == saved:
        return
    changed = [k for k, v in saved.items() if mods.get(k, _MISSING) is not v]
    for name in changed:
        now = mods.get(name)
        mods[name] = saved[name]
        parent, _, child = name.rpartition(".")
        if parent and now is not None and getattr(mods.get(parent), child, None) is now:
            setattr(mods[parent], child, saved[name])
    fake = [k for k in mods.keys() - saved.keys() if not isinstance(mods[k], types.ModuleType)]
    for name in fake:
        del mods[name]
    _modules_seen, _modules_seen_version = mods.copy(), modules_version()
    if changed or fake:
        restored.append(f"sys.modules ({', '.join(sorted(changed + fake))})")


__all__ = [
    "lists",
    "modules",
    "modules_version",
    "restore_lists",
    "restore_modules",
    "version_cell",
]
