"""What a quality comparison reads: each side's outputs, decoded whole (every frame, every
sample), the reference entry their checks were judged against, and a metric per frame over
whole outputs.

A check compares the frames its case selects (first, middle and last by default); a
comparison compares every frame, so a head that breaks only the frames in between is seen.
Whole videos go through the metric code's vectorized per-frame paths in one call, frames
equal to their counterpart cost one comparison (the metrics' identical-frame shortcut), and a
side whose output hash is the reference's own (``ReferenceEntry.source_hash``) is compared
with itself instead of reading the reference's files.

Nothing here raises for bad data: :class:`Unavailable` carries one line saying what could not
be read, and the caller falls back or reports it.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness import media, metrics
from harness.checks.quality import AUDIO_METRICS, COMPARE_MARGIN
from harness.errors import HarnessError
from harness.fsio import read_array
from harness.model import Attempt, Case
from harness.references.store import ReferenceEntry, ReferenceStore

# Output kinds a comparison decodes; a "file" (an MP4 encoded from arrays that are outputs
# themselves, a log) holds nothing a metric reads.
COMPARED_KINDS: frozenset[str] = frozenset({"video", "image", "audio", "tensor"})
# The metric an output no check measures is compared with, by kind.
DEFAULT_METRIC: Mapping[str, str] = {
    "video": "psnr",
    "image": "psnr",
    "audio": "audio_snr",
    "tensor": "max_abs",
}


class Unavailable(Exception):
    """An output, a reference or a metric that could not be had, with why (one line)."""


@dataclass(frozen=True)
class Output:
    """One recorded output, decoded: ``array`` holds every frame (``[T, H, W, C]`` video,
    ``[H, W, C]`` image, ``[C, N]`` or ``[N]`` audio, a tensor as saved), ``rate`` is the
    audio sample rate."""

    hash: str
    kind: str
    array: np.ndarray
    rate: int | None = None

    @property
    def nonfinite(self) -> int:
        a = self.array
        return int(a.size - np.count_nonzero(np.isfinite(a))) if a.dtype.kind in "fc" else 0


def load_output(root: Path, attempt: Attempt, name: str) -> Output:
    """Output ``name`` of ``attempt``, read from its file under ``root``."""
    info = attempt.outputs.get(name) or {}
    kind = str(info.get("kind", "tensor"))
    raw = info.get("path")
    if not raw:
        raise Unavailable(f"'{name}' of attempt #{attempt.index} has no file")
    path = root / str(raw)
    if not path.is_file():
        raise Unavailable(f"'{name}' of attempt #{attempt.index}: {path} does not exist")
    meta = info.get("meta") or {}
    rate = meta.get("sample_rate") if isinstance(meta, Mapping) else None
    try:
        if path.suffix == ".safetensors":
            array = np.asarray(read_array(path))
        elif kind == "audio":
            audio = media.decode_audio(path)
            array, rate = audio.pcm, audio.sample_rate
        elif kind in ("video", "image"):
            array = media.decode_video(path).frames
        else:
            raise Unavailable(f"'{name}': a {kind} file ({path.name}) holds nothing to compare")
    except (HarnessError, ValueError, OSError) as exc:
        raise Unavailable(f"'{name}': {path} could not be read: {exc}") from exc
    ok_rate = isinstance(rate, int) and not isinstance(rate, bool) and rate > 0
    return Output(str(info.get("hash", "")), kind, array, rate if ok_rate else None)


def metric_settings(case: Case | None, output: str, metric: str) -> dict[str, Any]:
    """The settings the case's check of ``metric`` on ``output`` computes with (none without
    the case: a saved comparison), less the comparison's own ``compare_margin``."""
    if case is None:
        return {}
    for spec in case.checks:
        if spec.metric == metric and spec.output in (None, output):
            return {k: v for k, v in spec.settings.items() if k != COMPARE_MARGIN}
    return {}


def per_frame(
    metric: str,
    pred: Output | np.ndarray,
    target: Output | np.ndarray,
    *,
    rate: int | None,
    settings: Mapping[str, Any],
) -> np.ndarray:
    """``metric`` of ``pred`` against ``target``, one value per frame (per clip for audio),
    as float64; :class:`Unavailable` when it cannot be computed."""
    p = pred.array if isinstance(pred, Output) else pred
    t = target.array if isinstance(target, Output) else target
    kw = dict(settings)
    if metric in AUDIO_METRICS:
        if rate is None:
            raise Unavailable(f"{metric} needs the audio's sample rate, and none was recorded")
        kw["sample_rate"] = rate
    elif p.shape != t.shape:
        raise Unavailable(f"shapes differ: {list(p.shape)} against {list(t.shape)}")
    try:
        m = metrics.get(metric)(**kw)
        with warnings.catch_warnings():  # NaN input warns in scipy; the value says NaN itself
            warnings.simplefilter("ignore", RuntimeWarning)
            m.update(p, t)
        r = m.compute()
    except Exception as exc:  # a metric that cannot run is reported, never raised
        raise Unavailable(f"{metric} could not be computed: {type(exc).__name__}: {exc}") from exc
    if r.status != "ok" or r.value is None:
        raise Unavailable(f"{metric} not run: {r.skipped_reason or 'no value'}")
    values = r.per_frame if r.per_frame is not None else (r.value,)
    return np.asarray([np.nan if v is None else v for v in values], dtype=np.float64)


def checked_reference(attempts: Sequence[Attempt], output: str) -> tuple[str, str | None] | None:
    """The reference entry key (``ref/class/output``) the attempts' checks of ``output`` used
    and when it was blessed; None when no check recorded one; :class:`Unavailable` when the
    checks used more than one."""
    seen: dict[str, str | None] = {}
    for a in attempts:
        for c in a.checks:
            key = c.settings.get("reference")
            if c.output == output and isinstance(key, str):
                when = c.settings.get("reference_blessed")
                seen.setdefault(key, when if isinstance(when, str) else None)
    if len(seen) > 1:
        raise Unavailable(f"the checks used {len(seen)} references ({', '.join(sorted(seen))})")
    return next(iter(seen.items()), None)


def reference_entry(store: ReferenceStore, key: str, blessed: str | None) -> ReferenceEntry:
    """The store's entry ``key``, as it was when the checks used it."""
    parts = key.rsplit("/", 2)
    if len(parts) != 3:
        raise Unavailable(f"reference key {key!r} is not ref/platform class/output")
    try:
        entry = store.get(parts[0], parts[2], parts[1])
    except HarnessError as exc:
        raise Unavailable(f"reference store {store.root}: {exc}") from exc
    if entry is None:
        raise Unavailable(f"{store.root} has no reference {key} (the checks used it)")
    if blessed is not None and entry.blessed.when != blessed:
        raise Unavailable(
            f"reference {key} was re-blessed ({entry.blessed.when}) after the runs used it "
            f"({blessed})"
        )
    return entry


def reference_array(
    store: ReferenceStore, entry: ReferenceEntry, sides: Sequence[Output]
) -> tuple[np.ndarray, int | None]:
    """The reference's content, in the dtype its checks compare in, and its sample rate. A
    side whose output is the blessed one (same content hash) stands in for its files."""
    rate = entry.sample_rate
    for out in sides:
        if entry.source_hash and out.hash == entry.source_hash:
            return _like(out.array, entry), rate or out.rate
    try:
        if entry.kind == "audio":
            pcm, rate = store.load_audio(entry)
            return pcm, rate
        return store.load(entry), rate
    except HarnessError as exc:
        raise Unavailable(f"reference {entry.key}: {exc}") from exc


def like_reference(out: Output, entry: ReferenceEntry) -> np.ndarray:
    """A side's output as its checks compared it with ``entry``: audio is rounded to the
    float32 the store keeps (as :mod:`harness.checks.quality` does); the rest as it is."""
    return _like(out.array, entry)


def _like(a: np.ndarray, entry: ReferenceEntry) -> np.ndarray:
    if entry.kind == "audio" and a.dtype.kind == "f" and a.dtype != np.float32:
        return a.astype(np.float32)
    return a
