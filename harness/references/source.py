"""What bless reads from a run folder: the report, the attempt to bless, and its outputs, each
output checked against the content hash the probe recorded when the attempt ran.

The recorded ``hash`` of an output is :func:`harness.probe.content_hash` of the array the
target handed to ``probe.output`` (dtype, shape and raw bytes; a torch bf16/fp16/fp8 tensor is
hashed in its own dtype, although the run saved it widened to float32), or, for a file output
(recorded with ``bytes``), the hash of the file's bytes. :func:`load_output` recomputes the same
hash from what is in the run folder now and refuses on any difference: a file that was edited,
swapped or truncated after the run is never pinned.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness import media, probe
from harness.errors import InputError, ReferenceStoreError, ReportFormatError
from harness.fsio import read_array
from harness.metrics import names as metric_names
from harness.model import Attempt, CaseResult, RunReport

__all__ = ["Chosen", "load_output", "pick_attempt", "read_report", "select_cases"]


@dataclass(frozen=True)
class Chosen:
    """The attempt bless takes from a case; ``first_bless`` when none passed and it is the last
    one that failed only quality checks (allowed only for outputs that have no reference yet)."""

    attempt: Attempt
    first_bless: bool


def read_report(run: Path) -> RunReport:
    """The run's ``report.json``; :class:`InputError` when the folder has none."""
    path = run / "report.json"
    if not path.is_file():
        raise InputError(f"{path}: no report.json in the run folder (is --run a run folder?)")
    try:
        return RunReport.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        raise ReportFormatError(f"{path}: cannot read the run report: {exc!r}") from exc


def select_cases(report: RunReport, case_id: str | None, platform: str) -> list[CaseResult]:
    """The results to bless: every case, or ``case_id``; ``platform`` picks among several."""
    ids = sorted({c.id for c in report.cases})
    if case_id is not None and case_id not in ids:
        raise InputError(f"case '{case_id}' is not in the run (cases: {', '.join(ids) or 'none'})")
    selected = []
    for cid in ids if case_id is None else [case_id]:
        candidates = [c for c in report.cases if c.id == cid]
        if len(candidates) > 1:
            candidates = [c for c in candidates if c.platform == platform] or candidates
        if len(candidates) > 1:
            raise InputError(
                f"case '{cid}' ran on platforms {[c.platform for c in candidates]}; "
                "say which to bless with --platform"
            )
        selected.append(candidates[0])
    return selected


def pick_attempt(result: CaseResult) -> Chosen:
    """The last passing measured attempt; else the last one that failed only quality checks.

    The second rule lets a first bless happen at all: without a reference, the quality checks
    of every attempt fail, although the target ran and produced its outputs. It is marked
    ``first_bless``; :func:`harness.references.rules.refuse_failed_checks` then refuses it for
    any output whose reference already exists.
    """
    quality_metrics = set(metric_names())
    measured = [a for a in result.attempts if not a.warmup]
    passed = [a for a in measured if a.status == "passed"]
    if passed:
        return Chosen(passed[-1], first_bless=False)
    only_quality = [
        a
        for a in measured
        if a.status == "failed"
        and a.error is not None
        and a.error.type == "CheckFailed"
        and all(c.metric in quality_metrics for c in a.checks if c.blocking)
    ]
    if only_quality:
        return Chosen(only_quality[-1], first_bless=True)
    statuses = ", ".join(f"#{a.index} {a.status}" for a in result.attempts) or "none"
    raise ReferenceStoreError(f"no passing measured attempt to bless (attempts: {statuses})")


def _resolve(run: Path, path: str) -> Path:
    p = Path(path)
    if p.is_absolute():
        return p
    return run / p if (run / p).exists() or not p.exists() else p


def load_output(run: Path, name: str, info: Mapping[str, Any]) -> np.ndarray:
    """The decoded content of one recorded output, after checking it against its hash."""
    raw = info.get("path")
    if not raw:
        raise ReferenceStoreError(f"output '{name}' has no file in the run (no 'path')")
    path = _resolve(run, str(raw))
    if not path.is_file():
        raise ReferenceStoreError(f"output '{name}': file {path} does not exist")
    recorded = str(info.get("hash") or "")
    if not recorded:
        raise ReferenceStoreError(
            f"output '{name}' records no content hash, so {path} cannot be checked against "
            "the attempt that produced it"
        )
    is_file = "bytes" in info  # probe.output of a path: the hash is of the file's bytes
    if is_file:
        _check_hash(name, path, recorded, probe.hash_input(path.read_bytes()))
    if path.suffix == ".safetensors":
        try:
            array = np.asarray(read_array(path))
        except ValueError as exc:
            raise ReferenceStoreError(f"output '{name}': {exc}") from exc
        if not is_file:
            _check_hash(name, path, recorded, probe.content_hash(_as_recorded(name, array, info)))
        return array
    if not is_file:
        raise ReferenceStoreError(
            f"output '{name}': {path} is not a safetensors file, but the attempt recorded an "
            "array output (saved as safetensors by the probe)"
        )
    if info.get("kind") == "audio":
        return media.decode_audio(path).pcm
    return media.decode_video(path).frames


def _check_hash(name: str, path: Path, recorded: str, actual: str) -> None:
    if actual != recorded:
        raise ReferenceStoreError(
            f"output '{name}': {path} does not match the attempt's record (recorded hash "
            f"{recorded}, the file now hashes to {actual}); it changed after the run, and a "
            "changed run file is never pinned: bless from an untouched run folder"
        )


def _as_recorded(name: str, array: np.ndarray, info: Mapping[str, Any]) -> Any:
    """The array in the dtype the probe hashed: torch bf16/fp16/fp8 outputs were hashed in
    their own dtype but saved widened to float32, which narrows back exactly."""
    dtype = info.get("dtype")
    if not isinstance(dtype, str) or dtype == str(array.dtype) or array.dtype != np.float32:
        return array
    import torch  # only for outputs that were torch tensors of a dtype numpy lacks

    narrow = getattr(torch, dtype, None)
    if not isinstance(narrow, torch.dtype) or not narrow.is_floating_point:
        return array  # not a dtype the probe widens: the hash comparison says the rest
    t = torch.from_numpy(np.array(array)).to(narrow)
    if not np.array_equal(t.to(torch.float32).numpy(), array, equal_nan=True):
        raise ReferenceStoreError(
            f"output '{name}': the attempt recorded a {dtype} output, but the saved float32 "
            f"values are not all {dtype} values; it changed after the run, and a changed run "
            "file is never pinned"
        )
    return t
