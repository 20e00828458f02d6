"""Bless: the only writer of the reference store.

``bless`` takes a finished run folder (``report.json`` plus the output files it names) and pins
the outputs of its cases as references: video frames as PNG, audio as float32 WAV, tensors as
safetensors (``file`` outputs such as an MP4 are not stored; their decoded frames are). From
each case it takes the last passing measured attempt; with none, the last one that failed only
quality checks, as every attempt does before the first bless, but only for outputs that have no
reference yet on the lookup chain.

It refuses, writing nothing for that case,

* never to be overridden: a simulated result ("a simulated <platform> result can never be a
  reference"); an output file that no longer matches the content hash the attempt recorded
  (:mod:`harness.references.source`); an output with NaN or Inf values, a blank or
  near-constant frame (std < ``MIN_FRAME_STD`` on 0-255) or silent audio
  (peak < ``MIN_AUDIO_PEAK``);
* unless ``force=True``: a case whose case-level checks failed (``identical_outputs`` across
  repeats, latency budgets); an output whose attempt failed its own quality checks while a
  reference exists on the lookup chain; an output that drifts from the reference the lookup
  chain of ``platform_class`` uses now (also when blessing into a new platform class, e.g.
  ``mi300x`` over ``any``): each quality check the attempt recorded on that output is re-run
  against it with the case's own op and threshold, and ``DRIFT_BOUNDS`` (video: worst-frame
  mean abs diff > 8 or SSIM < 0.9; audio: SNR < 20 dB; tensors: max abs diff > 1 % of range;
  any change of shape) applies as a floor, also to outputs without checks.

The rules and their bounds live in :mod:`harness.references.rules`.

From the same attempt it pins the case's layered reference (:mod:`harness.references.
bless_layers`): its input hashes and fingerprinted intermediates, which
:mod:`harness.references.layered` compares a later run with; an attempt recorded without
intermediates pins its outputs alone (and drops a layered reference it would contradict).

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
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.errors import HarnessError, InputError, ReferenceStoreError
from harness.metrics import names as metric_names
from harness.model import Attempt, CaseResult, fmt_number
from harness.references.bless_layers import PreparedLayers, prepare_layers, write_layers
from harness.references.layout import ensure_inside, entry_folder
from harness.references.rules import (
    drift_from,
    lookup_chain,
    quality_checks,
    refuse_case,
    refuse_failed_checks,
    refuse_unusable,
)
from harness.references.source import load_output, pick_attempt, read_report, select_cases
from harness.references.store import (
    BlessInfo,
    LayersEntry,
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
    # One line per layered reference pinned (or left without one, and why).
    layered: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.refused

    def format(self) -> str:
        """Human-readable lines for the CLI."""
        lines = []
        for b in self.blessed:
            what = "replaced" if b.replaced else "new"
            drift = ", ".join(f"{k}={fmt_number(v)}" for k, v in b.drift.items())
            lines.append(
                f"blessed {b.reference_id}/{b.platform_class}/{b.output} ({b.kind}, "
                f"{b.files} file{'s' if b.files != 1 else ''}, {what})"
                + (f" drift: {drift}" if drift else "")
            )
        lines += list(self.layered)
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
    report = read_report(run)
    results = select_cases(report, case_id, platform or platform_class)
    who = who or default_who()
    when = dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat()
    store = ReferenceStore(root)

    blessed: list[BlessedOutput] = []
    skipped: list[str] = []
    refused: list[str] = []
    layered: list[str] = []
    to_write: list[tuple[CaseResult, list[Prepared], PreparedLayers | None, str]] = []
    for result in results:
        try:
            prepared, skips = _prepare_case(run, result, store, platform_class, force)
            layers, why_not = prepare_layers(run, pick_attempt(result).attempt)
        except HarnessError as exc:
            refused.append(f"{result.name}: {exc}")
            continue
        skipped += skips
        to_write.append((result, prepared, layers, why_not))

    if to_write:
        root.mkdir(parents=True, exist_ok=True)
        # Re-read right before writing: the manifest on disk is the one we replace.
        manifest = read_manifest(root)
        entries = dict(manifest.entries)
        layer_entries = dict(manifest.layers)
        replaced: list[ReferenceEntry | LayersEntry] = []
        for result, prepared, layers, why_not in to_write:
            info = BlessInfo(
                reason=reason.strip(),
                who=who,
                when=when,
                run_id=report.run_id,
                source=str(run),
                forced=force,
            )
            lkey = (result.reference or result.id, platform_class)
            old_layers = layer_entries.pop(lkey, None)
            if old_layers is not None:
                replaced.append(old_layers)
            if layers is not None:
                layer_entries[lkey] = write_layers(root, result, layers, platform_class, info)
                layered.append(f"layers {lkey[0]}/{platform_class}: {layers.describe()}")
            else:
                dropped = "; the old layered reference is removed" if old_layers else ""
                layered.append(
                    f"layers {lkey[0]}/{platform_class}: none ({why_not}); explanations will "
                    f"say no layered reference{dropped}"
                )
            for p in prepared:
                info = replace(info, drift=p.drift)
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
        write_manifest(root, Manifest(entries=entries, layers=layer_entries))
        remove_replaced(root, replaced, [*entries.values(), *layer_entries.values()])

    summary = BlessSummary(
        str(root), tuple(blessed), tuple(skipped), tuple(refused), tuple(layered)
    )
    if refused:
        raise BlessRefusedError(
            "bless refused "
            + "; ".join(refused)
            + (f" (blessed {len(blessed)} other output(s))" if blessed else ""),
            summary,
        )
    return summary


# --- refusal rules ----------------------------------------------------------------------------


def _prepare_case(
    run: Path, result: CaseResult, store: ReferenceStore, platform_class: str, force: bool
) -> tuple[list[Prepared], list[str]]:
    refuse_case(result, force)
    chosen = pick_attempt(result)
    attempt = chosen.attempt
    chain = lookup_chain(platform_class, result.platform)
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
        array = load_output(run, name, info)
        refuse_unusable(name, kind, array, info)
        # The reference a lookup for this platform class uses now: the entry this bless
        # replaces, or the fallback it would shadow (e.g. ``any`` under a new ``mi300x``).
        current = _first_on_chain(store, reference_id, name, chain)
        refuse_failed_checks(attempt, name, current, chosen.first_bless, chain, force)
        drift: dict[str, Any] = {}
        if current is not None:
            drift = drift_from(
                store,
                current,
                kind,
                array,
                info,
                force,
                checks=quality_checks(attempt, name),
                replaces=current.platform_class == platform_class,
                chain=chain,
            )
        old = store.get(reference_id, name, platform_class)
        settings = _metric_settings(attempt, name)
        prepared.append(Prepared(name, kind, array, info, drift, old, settings))
    if not prepared:
        raise ReferenceStoreError(
            f"attempt #{attempt.index} has no video, image, audio or tensor output to bless"
        )
    return prepared, skips


def _first_on_chain(
    store: ReferenceStore, reference_id: str, output: str, chain: list[str]
) -> ReferenceEntry | None:
    for plat in chain:
        entry = store.get(reference_id, output, plat)
        if entry is not None:
            return entry
    return None


def _metric_settings(attempt: Attempt, output: str) -> dict[str, Any]:
    """The settings of the quality checks on this output (the ones this reference serves)."""
    quality_metrics = set(metric_names())
    out: dict[str, Any] = {}
    for c in attempt.checks:
        if c.metric in quality_metrics and c.output in (output, None):
            out[c.name] = {"metric": c.metric, **dict(c.settings)}
    return out
