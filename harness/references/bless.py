"""Bless: the only writer of the reference store.

``bless`` takes a finished run folder (``report.json`` plus the output files it names) and pins
the outputs of its cases as references: video frames as PNG, audio as float32 WAV, tensors as
safetensors (``file`` outputs such as an MP4 are not stored; their decoded frames are). It
refuses, writing nothing for that case, when an output

* holds NaN or Inf values;
* is a blank or near-constant image (a frame with std < ``MIN_FRAME_STD`` on 0-255) or
  silent audio (peak < ``MIN_AUDIO_PEAK``);
* drifts from the reference it would replace beyond ``DRIFT_BOUNDS`` (video: worst-frame
  mean abs diff > 8 or SSIM < 0.9; audio: SNR < 20 dB; tensors: max abs diff > 1 % of range;
  or any change of shape), unless ``force=True``.

The rules and their bounds live in :mod:`harness.references.rules`.

Every entry records why, by whom and when (UTC), the run it came from, the environment that
produced it and the harness version. Files and the manifest are written atomically (temp file +
``os.replace``) into a fresh content-addressed folder named with :func:`harness.fsio.slug`
(:mod:`harness.references.layout`; every written path is checked to resolve inside the store),
so a crash leaves either the old or the new reference, never a mix; a replaced entry's files
are deleted only if no other entry lists them; ``verify`` reports any leftovers.

Example::

    summary = bless(Path("reports/run-1"), Path("references"), case_id="t2va-int8",
                    reason="new scheduler default", who="alice")
    print(summary.format())
"""

from __future__ import annotations

import datetime as dt
import getpass
import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from harness import media
from harness.errors import HarnessError, InputError, ReferenceStoreError, ReportFormatError
from harness.fsio import read_array
from harness.metrics import names as metric_names
from harness.model import Attempt, CaseResult, RunReport
from harness.references.layout import ensure_inside, entry_folder
from harness.references.rules import drift_from, refuse_unusable
from harness.references.store import (
    BlessInfo,
    Manifest,
    ReferenceEntry,
    ReferenceStore,
    read_manifest,
)
from harness.references.writer import Prepared, remove_replaced, write_entry, write_manifest

__all__ = [
    "BlessRefusedError",
    "BlessSummary",
    "BlessedOutput",
    "bless",
    "default_who",
]

_STORED_KINDS = ("video", "image", "audio", "tensor")


class BlessRefusedError(ReferenceStoreError):
    """Bless refused one or more cases; ``summary`` says what was blessed and what was not."""

    def __init__(self, message: str, summary: BlessSummary) -> None:
        super().__init__(message)
        self.summary = summary


@dataclass(frozen=True)
class BlessedOutput:
    """One output pinned by a bless: where it went and how far it moved from the old one."""

    reference_id: str
    platform_class: str
    output: str
    kind: str
    files: int
    replaced: bool
    drift: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class BlessSummary:
    """What one bless did: outputs blessed, outputs skipped (with why), cases refused (why)."""

    store_root: str
    blessed: tuple[BlessedOutput, ...] = ()
    skipped: tuple[str, ...] = ()
    refused: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.refused

    def format(self) -> str:
        """Human-readable lines for the CLI."""
        lines = []
        for b in self.blessed:
            what = "replaced" if b.replaced else "new"
            drift = ", ".join(f"{k}={_fmt(v)}" for k, v in b.drift.items())
            lines.append(
                f"blessed {b.reference_id}/{b.platform_class}/{b.output} ({b.kind}, "
                f"{b.files} file{'s' if b.files != 1 else ''}, {what})"
                + (f" drift: {drift}" if drift else "")
            )
        lines += [f"skipped {s}" for s in self.skipped]
        lines += [f"REFUSED {r}" for r in self.refused]
        lines.append(f"store: {self.store_root}")
        return "\n".join(lines)


def default_who() -> str:
    """Who is blessing: ``$USER``, else ``git config user.name``, else the login name."""
    user = os.environ.get("USER", "").strip()
    if user:
        return user
    try:
        out = subprocess.run(
            ["git", "config", "user.name"], capture_output=True, text=True, timeout=5, check=False
        )
        if out.stdout.strip():
            return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        return getpass.getuser()
    except Exception:  # getpass raises OSError or KeyError depending on the platform
        return "unknown"


def bless(
    run_dir: Path | str,
    store_root: Path | str,
    *,
    case_id: str | None = None,
    force: bool = False,
    reason: str,
    who: str | None = None,
    platform_class: str = "any",
    platform: str | None = None,
) -> BlessSummary:
    """Pin the outputs of a run's cases as references in ``store_root``.

    ``case_id`` limits it to one case; ``platform`` picks which platform's result to bless when
    the run holds the case on several. The reference id is the case id (the convention of case
    files: ``reference = "<case id>"``). Raises :class:`BlessRefusedError` (a
    :class:`ReferenceStoreError`) after blessing the acceptable cases when any case is refused,
    and :class:`InputError` for an unreadable run folder or an unknown case.
    """
    run = Path(run_dir)
    root = Path(store_root)
    if not reason or not reason.strip():
        raise InputError("bless needs a reason (--reason TEXT): why are these outputs right?")
    report = _read_report(run)
    results = _select_cases(report, case_id, platform or platform_class)
    who = who or default_who()
    when = dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat()
    store = ReferenceStore(root)

    blessed: list[BlessedOutput] = []
    skipped: list[str] = []
    refused: list[str] = []
    to_write: list[tuple[CaseResult, list[Prepared]]] = []
    for result in results:
        try:
            prepared, skips = _prepare_case(run, result, store, platform_class, force)
        except HarnessError as exc:
            refused.append(f"{result.name}: {exc}")
            continue
        skipped += skips
        to_write.append((result, prepared))

    if to_write:
        root.mkdir(parents=True, exist_ok=True)
        # Re-read right before writing: the manifest on disk is the one we replace.
        manifest = read_manifest(root)
        entries = dict(manifest.entries)
        replaced: list[ReferenceEntry] = []
        for result, prepared in to_write:
            for p in prepared:
                info = BlessInfo(
                    reason=reason.strip(),
                    who=who,
                    when=when,
                    run_id=report.run_id,
                    source=str(run),
                    forced=force,
                    drift=p.drift,
                )
                entry = write_entry(root, result, p, platform_class, info, report)
                key = (entry.reference_id, entry.platform_class, entry.output)
                old = entries.get(key)
                if old is not None:
                    replaced.append(old)
                entries[key] = entry
                blessed.append(
                    BlessedOutput(
                        entry.reference_id,
                        platform_class,
                        p.output,
                        p.kind,
                        len(entry.files),
                        old is not None,
                        p.drift,
                    )
                )
        write_manifest(root, Manifest(entries=entries))
        remove_replaced(root, replaced, entries.values())

    summary = BlessSummary(str(root), tuple(blessed), tuple(skipped), tuple(refused))
    if refused:
        raise BlessRefusedError(
            "bless refused "
            + "; ".join(refused)
            + (f" (blessed {len(blessed)} other output(s))" if blessed else ""),
            summary,
        )
    return summary


# --- reading the run --------------------------------------------------------------------------


def _read_report(run: Path) -> RunReport:
    path = run / "report.json"
    if not path.is_file():
        raise InputError(f"{path}: no report.json in the run folder (is --run a run folder?)")
    import json

    try:
        return RunReport.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        raise ReportFormatError(f"{path}: cannot read the run report: {exc!r}") from exc


def _select_cases(report: RunReport, case_id: str | None, platform: str) -> list[CaseResult]:
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


def _pick_attempt(result: CaseResult) -> Attempt:
    """The last passing measured attempt; else the last one that failed only quality checks.

    The second rule lets a first bless happen at all: without a reference, the quality checks
    of every attempt fail, although the target ran and produced its outputs.
    """
    quality_metrics = set(metric_names())
    measured = [a for a in result.attempts if not a.warmup]
    passed = [a for a in measured if a.status == "passed"]
    if passed:
        return passed[-1]
    only_quality = [
        a
        for a in measured
        if a.status == "failed"
        and a.error is not None
        and a.error.type == "CheckFailed"
        and all(c.metric in quality_metrics for c in a.checks if c.blocking)
    ]
    if only_quality:
        return only_quality[-1]
    statuses = ", ".join(f"#{a.index} {a.status}" for a in result.attempts) or "none"
    raise ReferenceStoreError(f"no passing measured attempt to bless (attempts: {statuses})")


def _resolve(run: Path, path: str) -> Path:
    p = Path(path)
    if p.is_absolute():
        return p
    return run / p if (run / p).exists() or not p.exists() else p


def _load_output(run: Path, name: str, info: Mapping[str, Any]) -> np.ndarray:
    raw = info.get("path")
    if not raw:
        raise ReferenceStoreError(f"output '{name}' has no file in the run (no 'path')")
    path = _resolve(run, str(raw))
    if not path.is_file():
        raise ReferenceStoreError(f"output '{name}': file {path} does not exist")
    if path.suffix == ".safetensors":
        try:
            return np.asarray(read_array(path))
        except ValueError as exc:
            raise ReferenceStoreError(f"output '{name}': {exc}") from exc
    if info.get("kind") == "audio":
        return media.decode_audio(path).pcm
    return media.decode_video(path).frames


# --- refusal rules ----------------------------------------------------------------------------


def _prepare_case(
    run: Path, result: CaseResult, store: ReferenceStore, platform_class: str, force: bool
) -> tuple[list[Prepared], list[str]]:
    attempt = _pick_attempt(result)
    reference_id = result.reference or result.id
    prepared: list[Prepared] = []
    skips: list[str] = []
    for name, info in sorted(attempt.outputs.items()):
        kind = str(info.get("kind", "tensor"))
        if kind not in _STORED_KINDS:
            skips.append(
                f"{result.id}/{name}: kind '{kind}' is not stored (its decoded content is)"
            )
            continue
        # Checked here too, so a folder that resolves elsewhere (a symlink) refuses the case
        # before anything is written; the writer checks every path again.
        ensure_inside(store.root, store.root / entry_folder(reference_id, platform_class, name))
        array = _load_output(run, name, info)
        refuse_unusable(name, kind, array, info)
        old = store.get(reference_id, name, platform_class)
        drift: dict[str, Any] = {}
        if old is not None:
            drift = drift_from(store, old, kind, array, info, force)
        settings = _metric_settings(attempt, name)
        prepared.append(Prepared(name, kind, array, info, drift, old, settings))
    if not prepared:
        raise ReferenceStoreError(
            f"attempt #{attempt.index} has no video, image, audio or tensor output to bless"
        )
    return prepared, skips


def _metric_settings(attempt: Attempt, output: str) -> dict[str, Any]:
    """The settings of the quality checks on this output (the ones this reference serves)."""
    quality_metrics = set(metric_names())
    out: dict[str, Any] = {}
    for c in attempt.checks:
        if c.metric in quality_metrics and c.output in (output, None):
            out[c.name] = {"metric": c.metric, **dict(c.settings)}
    return out


def _fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)
