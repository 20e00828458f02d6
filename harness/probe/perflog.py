"""Per-request perf log for :func:`harness.probe.request`: a server's stages and fingerprints,
one JSON line per request, in a folder the harness names.

A server is not an attempt: it runs many requests, on several ranks, for as long as it lives,
and it never talks to the harness. So inside a server each request is recorded on its own,
with the same machinery as an attempt (a fresh ``_Recorder`` filled by the ordinary
``probe.stage``, ``probe.fingerprint`` and ``probe.note`` calls), and written when it ends to
``<HARNESS_PERF_LOG>/perf-rank<R>-<pid>.jsonl``: one file per process, appended and flushed
line by line, so a reader sees every finished request even while the server still runs, and
two ranks never write to one file.

One line (keys in this order)::

    {"schema": "harness.perf/1", "request_id": "r-1", "rank": 0, "world_size": 2,
     "pid": 4242, "started_at": 1764650000.123, "wall_s": 0.41,
     "stages": {"DenoisingStage": 0.30, ...}, "stage_cpu": {...},
     "fingerprints": {"denoise.step00": {"hash": ..., "shape": [...], ...}, ...},
     "inputs": {...}, "notes": {...}, "unclosed": [], "error": null,
     "code_file": "/wt/head/targets/tinyav/tinyav/serve/engine.py"}

``started_at`` is Unix time when the request opened, ``wall_s`` its wall seconds, ``error``
``"<Type>: <message>"`` when the block raised (the line is still written), ``code_file`` the
file that called :func:`harness.probe.request` (which checkout served it: code provenance).
Outputs are not recorded (``probe.output`` does nothing inside a request): the server answers
with them, and decoding its MP4 to count NaNs cost a tinyav request more than everything else
here. Without the environment variable nothing is recorded and :func:`harness.probe.request` is
a ``nullcontext``.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.probe.clocks import perf_counter

ENV = "HARNESS_PERF_LOG"
SCHEMA = "harness.perf/1"

# One lock per process: a line is written whole even if two threads finish requests at once.
_write_lock = threading.Lock()


def perf_folder() -> Path | None:
    """The folder named by ``HARNESS_PERF_LOG``, or None when it is unset or empty."""
    value = os.environ.get(ENV, "")
    return Path(value) if value else None


def perf_file(folder: Path, rank: int, pid: int | None = None) -> Path:
    """The JSONL file of one process: ``<folder>/perf-rank<R>-<pid>.jsonl``."""
    return folder / f"perf-rank{rank}-{os.getpid() if pid is None else pid}.jsonl"


def env_rank() -> int:
    """The process's rank from ``RANK`` (the torch.distributed variable), 0 when unset."""
    value = os.environ.get("RANK", "")
    return int(value) if value.strip().isdigit() else 0


def append_line(path: Path, record: dict[str, Any]) -> None:
    """Append ``record`` as one JSON line to ``path`` and flush it (the folder is created).

    A perf log that cannot be written never fails the request it describes: one line on
    stderr says why, and the server goes on."""
    text = json.dumps(record, default=str) + "\n"
    try:
        with _write_lock:
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a", encoding="utf-8") as fh:
                fh.write(text)
                fh.flush()
    except OSError as e:
        print(f"harness.probe: cannot append to the perf log {path}: {e}", file=sys.stderr)


class RequestScope:
    """The context of :func:`harness.probe.request`: records one request on a fresh recorder.

    ``new_recorder`` builds that recorder, ``swap`` installs a recorder as the probe's current
    one and returns the one it replaced (restored when the request ends: a request inside an
    attempt leaves the attempt as it was). Both come from :mod:`harness.probe`, which owns the
    current recorder; this module only times, collects and writes.
    """

    def __init__(
        self,
        folder: Path,
        request_id: str,
        rank: int | None,
        new_recorder: Callable[[], Any],
        swap: Callable[[Any], Any],
        code_file: str | None = None,
    ) -> None:
        self.folder = folder
        self.request_id = request_id
        self.rank = env_rank() if rank is None else int(rank)
        self.new_recorder = new_recorder
        self.swap = swap
        self.code_file = code_file
        self.rec: Any = None
        self.previous: Any = None
        self.started_at = 0.0
        self.start = 0.0

    def __enter__(self) -> None:
        self.rec = self.new_recorder()
        self.previous = self.swap(self.rec)
        self.started_at = time.time()
        self.start = perf_counter()

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        wall = perf_counter() - self.start
        rec = self.rec
        self.swap(self.previous)
        unclosed = rec.book.close()
        rec.settle()
        world = os.environ.get("WORLD_SIZE", "")
        record = {
            "schema": SCHEMA,
            "request_id": self.request_id,
            "rank": self.rank,
            "world_size": int(world) if world.isdigit() else 1,
            "pid": os.getpid(),
            "started_at": round(self.started_at, 6),
            "wall_s": wall,
            "stages": dict(rec.stages),
            "stage_cpu": dict(rec.stage_cpu),
            "fingerprints": dict(rec.fingerprints),
            "inputs": dict(rec.inputs),
            "notes": dict(rec.notes),
            "unclosed": list(unclosed),
            "error": None if exc_type is None else f"{exc_type.__name__}: {exc}",
            "code_file": self.code_file,
        }
        append_line(perf_file(self.folder, self.rank), record)
