"""Step 1 of loading: parse and validate a safetensors header without reading tensor data.

:func:`read_header` parses the 8-byte little-endian header length and the JSON header itself and
checks every entry (dtype known, shape sane, byte range inside the file and matching dtype x
shape, no overlaps); every rejection is a :class:`~tinyav.errors.CorruptCheckpointError` (or a
:class:`~tinyav.errors.CheckpointError` when the file cannot be read) naming the file and entry.
"""

from __future__ import annotations

import json
import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from tinyav.errors import CheckpointError, CorruptCheckpointError

# safetensors dtype -> (torch dtype, bytes per element)
DTYPES: dict[str, tuple[torch.dtype, int]] = {
    "BOOL": (torch.bool, 1),
    "U8": (torch.uint8, 1),
    "I8": (torch.int8, 1),
    "I16": (torch.int16, 2),
    "I32": (torch.int32, 4),
    "I64": (torch.int64, 8),
    "F16": (torch.float16, 2),
    "BF16": (torch.bfloat16, 2),
    "F32": (torch.float32, 4),
    "F64": (torch.float64, 8),
    "F8_E4M3": (torch.float8_e4m3fn, 1),
    "F8_E5M2": (torch.float8_e5m2, 1),
}
FLOAT_DTYPES = {"F16", "BF16", "F32", "F64"}

MAX_HEADER_BYTES = 64 << 20


@dataclass(frozen=True)
class TensorEntry:
    """One header entry; ``start``/``end`` are absolute file offsets."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    start: int
    end: int


@dataclass(frozen=True)
class Header:
    """A validated safetensors header."""

    path: Path
    file_size: int
    tensors: dict[str, TensorEntry]
    metadata: dict[str, str]


def read_header(path: str | os.PathLike[str]) -> Header:
    """Parse and validate the safetensors header of ``path`` without reading tensor data."""
    p = Path(path)
    try:
        size = p.stat().st_size
        with p.open("rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise CorruptCheckpointError(
                    p, f"truncated: {size} bytes, too short for the 8-byte header length"
                )
            (n,) = struct.unpack("<Q", head)
            if n > size - 8:
                raise CorruptCheckpointError(
                    p,
                    f"header length {n} is larger than the file allows "
                    f"({size - 8} bytes after the length)",
                )
            if n > MAX_HEADER_BYTES:
                raise CorruptCheckpointError(
                    p, f"header length {n} exceeds {MAX_HEADER_BYTES} bytes"
                )
            raw = f.read(n)
    except OSError as e:
        raise CheckpointError(p, f"cannot read: {e}") from e
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CorruptCheckpointError(p, f"header is not valid JSON ({e})") from e
    if not isinstance(doc, dict):
        raise CorruptCheckpointError(
            p, f"header is a JSON {type(doc).__name__}, expected an object"
        )
    data_start = 8 + n
    data_len = size - data_start
    metadata = doc.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        raise CorruptCheckpointError(p, "__metadata__ must map strings to strings")
    entries = {name: _entry(p, name, spec, data_start, data_len) for name, spec in doc.items()}
    last_end, last_name = data_start, None
    for ent in sorted(entries.values(), key=lambda x: (x.start, x.end)):
        if ent.start < last_end:
            raise CorruptCheckpointError(
                p, f"byte range overlaps tensor {last_name!r}", layer=ent.name
            )
        last_end, last_name = ent.end, ent.name
    return Header(p, size, entries, dict(metadata))


def _entry(p: Path, name: str, spec: Any, data_start: int, data_len: int) -> TensorEntry:
    if not isinstance(spec, dict) or set(spec) != {"dtype", "shape", "data_offsets"}:
        raise CorruptCheckpointError(
            p, "entry must have exactly dtype, shape, data_offsets", layer=name
        )
    dtype, shape, offsets = spec["dtype"], spec["shape"], spec["data_offsets"]
    if dtype not in DTYPES:
        raise CorruptCheckpointError(p, f"unknown dtype {dtype!r}", layer=name)
    if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise CorruptCheckpointError(
            p, f"shape {shape!r} is not a list of non-negative ints", layer=name
        )
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(isinstance(o, int) for o in offsets)
        or not 0 <= offsets[0] <= offsets[1]
    ):
        raise CorruptCheckpointError(
            p, f"data_offsets {offsets!r} are not [begin, end]", layer=name
        )
    begin, end = offsets
    if end > data_len:
        raise CorruptCheckpointError(
            p,
            f"truncated: tensor bytes [{begin}, {end}) exceed the {data_len}-byte data section",
            layer=name,
        )
    expected = math.prod(shape) * DTYPES[dtype][1]
    if end - begin != expected:
        raise CorruptCheckpointError(
            p,
            f"dtype {dtype} x shape {shape} needs {expected} bytes but the byte range holds "
            f"{end - begin}",
            layer=name,
        )
    return TensorEntry(name, dtype, tuple(shape), data_start + begin, data_start + end)


def read_bytes(header: Header, entry: TensorEntry) -> bytes:
    with header.path.open("rb") as f:
        f.seek(entry.start)
        return f.read(entry.end - entry.start)
