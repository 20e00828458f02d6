"""A server case's server-side records: the perf-log lines its server wrote (one JSON line per
request and rank, ``$HARNESS_PERF_LOG/perf-rank<R>-<pid>.jsonl``, see
:func:`harness.probe.request`) read back into the attempt: rank 0's stages and fingerprints,
other ranks' stage seconds as notes, and each line's ``code_file`` for code provenance."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from harness import probe
from harness.model.provenance import TARGET_FILE


def _perf_lines(folder: Path) -> Iterator[dict[str, Any]]:
    for path in sorted(folder.glob("perf-rank*.jsonl")):
        with contextlib.suppress(OSError), path.open(encoding="utf-8", errors="replace") as fh:
            for line in fh:
                with contextlib.suppress(ValueError):
                    record = json.loads(line)
                    if isinstance(record, dict):
                        yield record


def record_perf_log(folder: Path, ids: Mapping[str, str]) -> None:
    """Record the perf-log lines of the requests ``ids`` (request id -> name prefix): rank 0's
    stages and fingerprints into the attempt, other ranks' stages as notes."""
    seen: set[str] = set()
    other: dict[str, float] = {}
    for line in _perf_lines(folder):
        rid = str(line.get("request_id"))
        if rid not in ids:
            continue
        seen.add(rid)
        rank, prefix = line.get("rank", 0), ids[rid]
        stages = line.get("stages") or {}
        if rank == 0:
            probe._absorb(
                stages, line.get("stage_cpu") or {}, line.get("fingerprints") or {}, prefix
            )
        else:
            for name, seconds in stages.items():
                key = f"server.rank{rank}.{name}"
                other[key] = other.get(key, 0.0) + float(seconds)
        if line.get("error"):
            probe.note(f"server.rank{rank}.{prefix}error", str(line["error"]))
        _note_code_file(line)
    for key, seconds in other.items():
        probe.note(key, seconds)
    missing = [rid for rid in ids if rid not in seen]
    if missing:
        probe.note(
            "server.perf_log",
            f"no perf-log line for request ids {missing} in {folder} (a server that does not "
            "call harness.probe.request records no server-side stages)",
        )


def _note_code_file(line: Mapping[str, Any]) -> None:
    """The file that served a request on its rank (``code_file`` of its perf-log line), noted
    for code provenance: ``server.harness.target_file`` (rank 0), ``server.rank<R>....``."""
    if isinstance(line.get("code_file"), str):
        rank = line.get("rank", 0)
        key = "server." if rank == 0 else f"server.rank{rank}."
        probe.note(key + TARGET_FILE, line["code_file"])


def note_code_files(folder: Path, ids: Mapping[str, str]) -> None:
    """Code provenance of a failed attempt's requests (the other records are not kept)."""
    for line in _perf_lines(folder):
        if str(line.get("request_id")) in ids:
            _note_code_file(line)


__all__ = ["note_code_files", "record_perf_log"]
