"""The one atomic writer and the one filename slug.

Every file the harness writes goes through :func:`write_atomic` (a temporary name in the same
folder, then ``os.replace``), so a reader never sees half a file and a crash leaves the old file
or the new one. :func:`slug` turns a name into a file name, injectively: two different names
never share a file or a folder, and no slug resolves outside the folder it is joined to.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

_SAFE = re.compile(r"[A-Za-z0-9._-]+")


def write_atomic(path: Path, write: Callable[[Path], None]) -> None:
    """``write(tmp)`` then ``os.replace(tmp, path)``. The temporary name keeps the suffix, so
    writers that pick a format from the name (WAV, PNG, safetensors) still work."""
    tmp = path.with_name(f"{path.stem}.tmp-{os.getpid()}{path.suffix}")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_text_atomic(path: Path, text: str) -> None:
    def write(tmp: Path) -> None:
        tmp.write_text(text, encoding="utf-8")

    write_atomic(path, write)


def write_json_atomic(path: Path, doc: Any) -> None:
    """JSON with non-finite floats spelled as strings (see :mod:`harness.model.vocab`)."""
    from harness.model.vocab import json_safe

    text = json.dumps(json_safe(doc), indent=2, allow_nan=False, default=str) + "\n"
    write_text_atomic(path, text)


def slug(name: str) -> str:
    """A file-name-safe, injective spelling of ``name``.

    A name made only of ``[A-Za-z0-9._-]`` that is not ``.``/``..`` and does not start with a
    dot stays as it is; any other name gets its unsafe characters replaced and a short hash of
    the original appended, so ``"a b"`` and ``"a_b"`` never collide.

    >>> slug("t2va-int8")
    't2va-int8'
    >>> slug("a b") != slug("a_b")
    True
    """
    if name and _SAFE.fullmatch(name) and not name.startswith("."):
        return name
    clean = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "_"
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{clean[:80]}~{digest}"


def write_array(path: Path, array: Any, metadata: dict[str, str] | None = None) -> None:
    """The one safetensors codec for an array output or reference: key ``data``."""
    import numpy as np
    from safetensors.numpy import save_file

    data = np.ascontiguousarray(array)
    write_atomic(path, lambda t: save_file({"data": data}, str(t), metadata=metadata))


def read_array(path: Path) -> Any:
    """Inverse of :func:`write_array`; raises ``ValueError`` naming the file on a bad one."""
    import numpy as np
    from safetensors.numpy import load_file

    try:
        return np.asarray(load_file(str(path))["data"])
    except Exception as exc:  # safetensors raises its own error types
        raise ValueError(f"cannot load {path}: {type(exc).__name__}: {exc}") from exc
