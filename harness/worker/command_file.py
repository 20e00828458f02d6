"""Which file a server's command runs, resolved as its interpreter will (code provenance of a
server that never calls ``harness.probe.request``, so has no perf log to say it).

``python path/to/serve.py`` runs that file (relative to the server's working folder);
``python -m pkg.serve`` the module found first on the path the interpreter builds: the working
folder (unless ``-P``, ``-I`` or ``PYTHONSAFEPATH``), ``PYTHONPATH``, then, when the command's
interpreter is the worker's own, the worker's remaining ``sys.path`` (its environment). A
console script (``sglang serve``), ``-c`` or a module found nowhere resolves to None: nothing is
claimed that the interpreter might not do.

Example::

    command_file(["/usr/bin/python3", "-u", "-m", "tinyav.serve", "--port", "8000"],
                 {"PYTHONPATH": "/wt/head/targets/tinyav"}, "/wt/head")
    # "/wt/head/targets/tinyav/tinyav/serve/__main__.py"
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from importlib.machinery import ModuleSpec, PathFinder
from pathlib import Path

__all__ = ["command_file"]

# Interpreter options that take a value (``-X dev``, ``-W error``).
_WITH_VALUE = frozenset({"-X", "-W", "--check-hash-based-pycs"})


def _is_python(exe: str) -> bool:
    return exe == sys.executable or Path(exe).name.startswith("python")


def _find(module: str, path: list[str]) -> str | None:
    spec: ModuleSpec | None = None
    search: Sequence[str] | None = path
    for part in module.split("."):
        if search is None:
            return None
        spec = PathFinder.find_spec(part, list(search))
        if spec is None:
            return None
        search = spec.submodule_search_locations
    if spec is None:
        return None
    if spec.submodule_search_locations is not None:  # a package: ``-m`` runs its __main__
        main = PathFinder.find_spec("__main__", list(spec.submodule_search_locations))
        return main.origin if main is not None and main.origin else None
    return spec.origin if spec.origin and os.path.isfile(spec.origin) else None


def command_file(argv: Sequence[str], env: Mapping[str, str], cwd: str) -> str | None:
    """The absolute path of the file ``argv`` runs (see the module doc), or None."""
    if not argv or not _is_python(argv[0]):
        return None
    safe, isolated = bool(env.get("PYTHONSAFEPATH")), False
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("-m"):
            module = arg[2:] or (argv[i + 1] if i + 1 < len(argv) else "")
            if not module:
                return None
            path = [] if safe or isolated else [cwd]
            if not isolated:
                path += [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
            if argv[0] == sys.executable:
                path += [p for p in sys.path if p]
            found = _find(module, [os.path.join(cwd, p) for p in path])
            return os.path.abspath(found) if found else None
        if arg.startswith("-c") or arg == "-":
            return None
        if arg == "-P":
            safe = True
        elif arg == "-I":
            isolated = True
        elif arg in _WITH_VALUE:
            i += 1
        elif not arg.startswith("-"):
            script = os.path.join(cwd, arg)
            return os.path.abspath(script) if os.path.isfile(script) else None
        i += 1
    return None
