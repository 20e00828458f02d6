"""The one atomic writer, the one filename slug and the one safetensors codec.

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
import sys
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
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text_atomic(path: Path, text: str) -> None:
    def write(tmp: Path) -> None:
        tmp.write_text(text, encoding="utf-8")

    write_atomic(path, write)


def write_json_atomic(path: Path, doc: Any, *, indent: int | None = 2) -> None:
    """JSON with non-finite floats spelled as strings (see :mod:`harness.model.vocab`).
    ``indent=None`` writes one line with the C encoder (Python's own encoder, which any
    ``indent`` needs, took ~1 ms per case of a run's report.json)."""
    from harness.model.vocab import json_dumps

    write_text_atomic(path, json_dumps(doc, indent=indent) + "\n")


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


# safetensors dtypes numpy holds as they are; bf16 and fp8 are widened by :func:`read_tensors`.
_NUMPY_DTYPES = {
    "F64": "<f8",
    "F32": "<f4",
    "F16": "<f2",
    "I64": "<i8",
    "I32": "<i4",
    "I16": "<i2",
    "I8": "i1",
    "U64": "<u8",
    "U32": "<u4",
    "U16": "<u2",
    "U8": "u1",
    "BOOL": "?",
}


def _e4m3fn_values() -> Any:
    """float32 value of every float8_e4m3fn bit pattern (no Inf; S.1111.111 is NaN)."""
    import numpy as np

    b = np.arange(256)
    e, m = (b >> 3) & 0xF, (b & 7) / 8
    mag = np.where(e == 0, m * 2.0**-6, (1 + m) * 2.0 ** (e - 7.0))
    val = np.where(b >> 7, -mag, mag)
    val[(b & 0x7F) == 0x7F] = np.nan
    return val.astype(np.float32)


def _widen(dtype: str, raw: Any, where: str) -> Any:
    """One tensor's little-endian bytes (a uint8 array) as numpy; bf16/fp8 as float32."""
    import numpy as np

    if dtype in _NUMPY_DTYPES:
        return raw.view(np.dtype(_NUMPY_DTYPES[dtype]))
    if dtype == "BF16":  # the top half of a float32
        return (raw.view("<u2").astype(np.uint32) << 16).view(np.float32)
    if dtype == "F8_E5M2":  # the top byte of a float16
        return (raw.astype("<u2") << 8).view(np.float16).astype(np.float32)
    if dtype == "F8_E4M3":
        return _e4m3fn_values()[raw]
    raise ValueError(f"{where} has dtype {dtype}, which the harness cannot decode")


def _read_raw(path: Path) -> dict[str, Any]:
    """Every tensor of a safetensors file, read from its own header (no torch needed)."""
    import numpy as np

    if path.stat().st_size < 8:
        raise ValueError(f"{path}: not a safetensors file ({path.stat().st_size} bytes)")
    data = np.memmap(path, dtype=np.uint8, mode="r")
    n = int.from_bytes(bytes(data[:8]), "little")
    if n < 2 or 8 + n > data.size:
        raise ValueError(f"{path}: not a safetensors file (no valid header length)")
    header = json.loads(bytes(data[8 : 8 + n]))
    out = {}
    for key, info in header.items():
        if key == "__metadata__":
            continue
        where = f"{path}: tensor '{key}'"
        lo, hi = info["data_offsets"]
        if not 0 <= lo <= hi <= data.size - 8 - n:
            raise ValueError(f"{where}: data_offsets {[lo, hi]} lie outside the file")
        out[key] = _widen(info["dtype"], data[8 + n + lo : 8 + n + hi], where).reshape(
            info["shape"]
        )
    return out


def read_tensors(path: Path) -> dict[str, Any]:
    """Every tensor of a safetensors file as a numpy array, by name.

    Tensors numpy cannot hold (bf16, fp8) are widened to float32, which keeps every value
    (NaN and Inf included): through torch when the process has already imported it, else from
    the file's own header, so reading never imports torch. Raises ``ValueError`` naming the
    file (and the tensor) on anything it cannot decode.
    """
    from safetensors.numpy import load_file

    try:
        return dict(load_file(str(path)))
    except Exception:  # numpy lacks bf16/fp8 (or the file is broken: the readers below say)
        pass
    torch = sys.modules.get("torch")
    if torch is not None:
        from safetensors.torch import load_file as load_torch

        try:
            tensors = load_torch(str(path))
        except Exception:  # a dtype this torch lacks, or a broken file: the raw reader says
            pass
        else:
            return {
                k: (
                    t.to(torch.float32)
                    if t.dtype == torch.bfloat16 or "float8" in str(t.dtype)
                    else t
                )
                .contiguous()
                .numpy()
                for k, t in tensors.items()
            }
    try:
        return _read_raw(path)
    except ValueError:
        raise
    except Exception as exc:  # a header that is not JSON, or not the layout it should be
        raise ValueError(f"{path}: cannot read safetensors: {type(exc).__name__}: {exc}") from exc
