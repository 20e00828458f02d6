"""Cold-import scenarios: what importing a module (and a first lookup) pulls into
``sys.modules``. Run in a fresh interpreter (``fresh_process = true``); this module and the
package above it import nothing heavy, so they do not spoil the count."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

from tinyav._probe import probe


def cold_import(
    module: str = "tinyav.quant",
    absent: Sequence[str] = (),
    access: str | None = None,
    present_after: Sequence[str] = (),
    absent_after: Sequence[str] = (),
) -> None:
    """In a fresh interpreter: importing ``module`` must not import ``absent``; then accessing
    attribute ``access`` (``"module:Attr"`` or a backend name for ``get_quantization_config``)
    imports ``present_after`` and still not ``absent_after``.

    A module of ``absent`` (or ``absent_after``) that is already imported before ``module`` is
    imported makes the check meaningless, not passed: that is an error naming the culprit (an
    interpreter that is not bare, e.g. a worker that pre-imports torch), not a failure of
    ``module``.
    """
    if module in sys.modules:
        raise RuntimeError(f"{module} is already imported: this case needs fresh_process = true")
    preloaded = [m for m in (*absent, *absent_after) if m in sys.modules]
    if preloaded:
        raise RuntimeError(
            f"{preloaded} already imported before import {module}: this interpreter is not "
            "bare (something imported them at start-up), so the case cannot tell whether "
            f"{module} imports them"
        )
    with probe.stage("ColdImport"):
        mod = importlib.import_module(module)
    leaked = [m for m in absent if m in sys.modules]
    assert not leaked, f"import {module} also imported {leaked}"
    if access is not None:
        with probe.stage("FirstLookup"):
            if ":" in access:
                mod_name, attr = access.split(":", 1)
                getattr(importlib.import_module(mod_name), attr)
            else:
                mod.get_quantization_config(access)
        missing = [m for m in present_after if m not in sys.modules]
        assert not missing, f"after {access}: {missing} not imported"
        leaked = [m for m in absent_after if m in sys.modules]
        assert not leaked, f"after {access}: {leaked} imported too"
    probe.note("import.modules", len(sys.modules))
