"""Quality checks: an output against its pinned reference, one verdict that explains itself.

:func:`evaluate` runs one declared check (``ssim``, ``psnr``, ``mae``, ``max_abs``, ``clip``,
``audio_snr``, ``audio_mad``, ``audio_lsd``) of one attempt: it looks the reference up along the
platform fallback chain, selects the frames (``spec.frames`` or the case's ``frames``), computes
the metric per frame, and applies the threshold to the worst frame (or the mean with
``reduce = "mean"``). The :class:`~harness.model.CheckResult` keeps one ``details`` row per
frame and the metric's settings, so :func:`harness.report.text.explain_check` can print why a
check failed::

    ssim(video): FAILED, obtained 0.8123 (worst of 3 frames), required >= 0.98
    reference: t2va-int8/any/video
    settings: data_range=255.0, sigma=1.5, window=gaussian, window_size=11, ...
      metric  frame  obtained  op  threshold  passed
      ssim        0    0.9991  >=       0.98  yes
      ssim       62    0.8123  >=       0.98  NO

Nothing passes by default: a missing store, reference, output or file fails the check with a
reason; only CLIP without a configured model is *not run* (``passed=None``), and says so.

An output is compared only with a reference of its own dtype, because the dtype fixes the value
scale (uint8 frames are 0-255, float frames usually 0-1) and a dtype change is itself a change
of behaviour. So the check *fails*, saying both dtypes, when

* a video or image output is not uint8 (every frame reference is uint8 PNG, 0-255): float
  frames never pass against uint8 frames, whatever their values;
* a tensor or audio output's dtype differs from the dtype its reference was blessed from
  (``ReferenceEntry.dtype``), e.g. float64 against float32;
* audio is not floating point (the references are full-scale float PCM).

The one conversion that is made is the store's own: audio is kept as float32 WAV, so audio
blessed from, and produced as, float64 is rounded to float32 before comparing, and the check
states it in ``settings["converted"]`` (``"float64 -> float32 (...)"``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness import media, metrics
from harness.checks.missing import NO_REFERENCE, lacks_reference
from harness.errors import HarnessError, NoReferenceError
from harness.fsio import read_array
from harness.metrics import MetricResult, Reduce
from harness.model import Case, CheckResult, CheckSpec, compare, fmt_number
from harness.references.store import ReferenceEntry, ReferenceStore

__all__ = [
    "AUDIO_METRICS",
    "CLIP_ENV",
    "COMPARE_MARGIN",
    "NO_REFERENCE",
    "QUALITY_METRICS",
    "compare",
    "evaluate",
    "lacks_reference",
]

# Every registered metric compares an output with its reference.
QUALITY_METRICS: frozenset[str] = frozenset(metrics.names())
AUDIO_METRICS: frozenset[str] = frozenset({"audio_snr", "audio_mad", "audio_lsd", "audio_lag_ms"})
CLIP_ENV = "HARNESS_CLIP_MODEL"
# A check setting read by `harness compare` (the quality margin of that metric for the case).
COMPARE_MARGIN = "compare_margin"
CLIP_NOT_CONFIGURED = f"no CLIP model configured (set {CLIP_ENV})"
# A check that failed only because its output was never blessed: its reason begins with
# NO_REFERENCE, and `harness run` prints the bless command that pins it (harness.checks.missing).

_VIDEO_KINDS = ("video", "image")


class _CheckFailed(Exception):
    """Internal: the check cannot be computed and fails with this reason."""


def evaluate(
    spec: CheckSpec,
    case: Case,
    platform_chain: Sequence[str],
    outputs: Mapping[str, Mapping[str, Any]],
    arrays: Mapping[str, np.ndarray],
    store: ReferenceStore | None,
    threshold_chain: Sequence[str] | None = None,
    decoded: dict[tuple[str, bool], np.ndarray] | None = None,
) -> CheckResult:
    """Run one quality check of one attempt against the pinned reference.

    ``outputs`` are the attempt's recorded outputs (``kind``, ``path``, ``meta``...), ``arrays``
    the in-memory arrays of those outputs (a file-only output is decoded from its ``path``).
    The threshold is read along ``threshold_chain`` (default: ``platform_chain``). ``decoded``
    (the same dict for every check of an attempt) keeps each file decoded once: an SSIM and a
    PSNR check of one MP4 decode it once, read-only.
    """
    threshold = spec.threshold_for(
        threshold_chain if threshold_chain is not None else platform_chain
    )

    def result(
        passed: bool | None,
        reason: str | None,
        value: Any = None,
        output: str | None = spec.output,
        settings: Mapping[str, Any] | None = None,
        details: tuple[Mapping[str, Any], ...] = (),
    ) -> CheckResult:
        return CheckResult(
            name=spec.name or spec.metric,
            metric=spec.metric,
            value=value,
            op=spec.op,
            threshold=threshold,
            policy="warn" if spec.policy == "warn" else "fail",
            passed=passed,
            output=output,
            reason=reason,
            settings=dict(settings or {}),
            details=details,
        )

    if spec.metric not in QUALITY_METRICS:
        return result(
            False, f"'{spec.metric}' is not a quality metric ({', '.join(sorted(QUALITY_METRICS))})"
        )
    if spec.metric == "clip" and not (os.environ.get(CLIP_ENV) or spec.settings.get("model_path")):
        return result(None, CLIP_NOT_CONFIGURED)
    try:
        name = _output_name(spec, outputs, arrays)
    except _CheckFailed as exc:
        return result(False, str(exc))
    if store is None:
        return result(
            False,
            f"{NO_REFERENCE}: output '{name}' has nothing to compare with (no reference "
            "store: no references/ folder here and no --references DIR)",
            output=name,
        )
    reference_id = case.reference or case.id
    try:
        entry = store.lookup(reference_id, name, platform_chain)
        obtained = _obtained(name, spec.metric, outputs, arrays, decoded)
    except NoReferenceError as exc:
        return result(False, f"{NO_REFERENCE}: {exc}", output=name)
    except (HarnessError, _CheckFailed) as exc:
        return result(False, str(exc), output=name)
    where = {"reference": entry.key, "reference_blessed": entry.blessed.when}
    if tuple(obtained.shape) != tuple(entry.shape):
        return result(
            False,
            f"output '{name}' has shape {list(obtained.shape)} but reference {entry.key} has "
            f"shape {list(entry.shape)}",
            output=name,
            settings=where,
        )
    try:
        frames = _frames(spec, case, obtained)
        reference = _load_reference(store, entry, frames)
        obtained, converted = _like_reference(name, obtained, entry, reference)
        if converted:
            where["converted"] = converted
        # Audio metrics bound their alignment in time: they need the reference's sample rate.
        rate = {"sample_rate": entry.sample_rate} if _is_audio(spec.metric) else {}
        every = not frames or frames == list(range(len(obtained)))  # no copy of all frames
        metric = _compute(spec, obtained if every else obtained[frames], reference, rate)
    except (HarnessError, _CheckFailed) as exc:
        return result(False, str(exc), output=name, settings=where)
    if metric.status == "not_run":
        return result(
            None,
            f"not run: {metric.skipped_reason or 'the metric could not run'}",
            output=name,
            settings={**metric.settings, **where},
        )
    value = metric.value
    per = list(metric.per_frame) if metric.per_frame is not None else [value]
    labels: list[Any] = list(frames) if frames and len(per) == len(frames) else ["all"] * len(per)
    details = tuple(
        {
            "frame": label,
            "obtained": v,
            "threshold": threshold,
            "passed": compare(v, spec.op, threshold),
        }
        for label, v in zip(labels, per, strict=True)
    )
    passed = compare(value, spec.op, threshold)
    unit = {"unit": metric.unit} if metric.unit else {}
    settings = {**metric.settings, **unit, "frames": list(frames) or "all", **where}
    reason = None
    if not passed:
        how = "mean" if spec.reduce == "mean" else "worst"
        failing = [str(r["frame"]) for r in details if not r["passed"]]
        reason = (
            f"{spec.metric} of '{name}' is {fmt_number(value)} ({how} of {len(per)}), "
            f"required {spec.op} {fmt_number(threshold)}"
            + (f"; failing frames: {', '.join(failing)}" if failing and labels[0] != "all" else "")
        )
    return result(passed, reason, value, name, settings, details)


# --- inputs -----------------------------------------------------------------------------------


def _is_audio(metric: str) -> bool:
    return metric in AUDIO_METRICS


def _output_name(
    spec: CheckSpec, outputs: Mapping[str, Mapping[str, Any]], arrays: Mapping[str, Any]
) -> str:
    if spec.output is not None:
        if spec.output not in outputs and spec.output not in arrays:
            have = sorted({*outputs, *arrays})
            raise _CheckFailed(
                f"the attempt recorded no output '{spec.output}' "
                f"(recorded: {', '.join(have) or 'none'})"
            )
        return spec.output
    want = ("audio",) if _is_audio(spec.metric) else _VIDEO_KINDS
    names = sorted(n for n, info in outputs.items() if info.get("kind") in want)
    if len(names) == 1:
        return names[0]
    raise _CheckFailed(
        f"the check names no output and the attempt has {len(names)} {'/'.join(want)} "
        f'outputs ({", ".join(names) or "none"}); set output = "..." in the check'
    )


def _obtained(
    name: str,
    metric: str,
    outputs: Mapping[str, Mapping[str, Any]],
    arrays: Mapping[str, Any],
    decoded: dict[tuple[str, bool], np.ndarray] | None = None,
) -> np.ndarray:
    if name in arrays:
        return np.asarray(arrays[name])
    raw = outputs.get(name, {}).get("path")
    if not raw:
        raise _CheckFailed(f"output '{name}' has neither an in-memory array nor a file")
    path = Path(str(raw))
    if path.suffix == ".safetensors":
        try:
            return np.asarray(read_array(path))
        except ValueError as exc:
            raise _CheckFailed(f"output '{name}': {exc}") from exc
    key = (str(path), _is_audio(metric))
    if decoded is not None and key in decoded:
        return decoded[key]
    got = media.decode_audio(path).pcm if key[1] else media.decode_video(path).frames
    if decoded is not None:
        got.flags.writeable = False  # shared by the attempt's checks: none may change it
        decoded[key] = got
    return got


def _like_reference(
    name: str, obtained: np.ndarray, entry: ReferenceEntry, reference: np.ndarray
) -> tuple[np.ndarray, str | None]:
    """``obtained`` ready to compare with ``reference``, and the conversion made (if any);
    :class:`_CheckFailed` when its dtype differs from the reference's (see the module doc)."""
    got = str(obtained.dtype)
    if entry.kind in _VIDEO_KINDS:
        if obtained.dtype != np.uint8:
            raise _CheckFailed(
                f"output '{name}' is {got} frames, but reference {entry.key} is uint8 frames "
                f"(0-255): {got} frames are not on the reference's scale and are never compared "
                "with it; convert the frames to uint8 in the target (as bless requires of a "
                f"{entry.kind} reference)"
            )
        return obtained, None
    blessed = entry.dtype or str(reference.dtype)
    if entry.kind == "audio" and obtained.dtype.kind != "f":
        raise _CheckFailed(
            f"output '{name}' is {got} PCM, but reference {entry.key} is float PCM (full scale "
            "1.0); integer samples are on another scale: convert them to float in the target"
        )
    if got != blessed:
        raise _CheckFailed(
            f"output '{name}' is {got}, but reference {entry.key} was blessed from a {blessed} "
            f"output: a dtype change is a change of behaviour (and of value range), so the "
            "output is not compared; cast it in the target, or re-bless the reference if the "
            "change is intended"
        )
    if entry.kind == "audio" and obtained.dtype != reference.dtype:
        stored = str(reference.dtype)
        return (
            obtained.astype(reference.dtype),
            f"{got} -> {stored} (audio references are stored as {stored} WAV)",
        )
    if obtained.dtype != reference.dtype:
        raise _CheckFailed(
            f"reference {entry.key} decodes to {reference.dtype}, but its manifest entry says "
            f"{blessed}; re-bless it"
        )
    return obtained, None


def _load_reference(store: ReferenceStore, entry: ReferenceEntry, frames: list[int]) -> np.ndarray:
    if entry.kind == "audio":
        return store.load_audio(entry)[0]
    if entry.kind == "video" and frames:
        return store.load_video(entry, frames)  # only the compared frames are read
    return store.load(entry)


def _frames(spec: CheckSpec, case: Case, obtained: np.ndarray) -> list[int]:
    """The compared frame indices; none (compare whole) for audio, tensors and images."""
    if _is_audio(spec.metric) or obtained.dtype != np.uint8 or obtained.ndim != 4:
        return []
    frames_spec = spec.frames if spec.frames is not None else case.frames
    try:
        return media.select_frames(int(obtained.shape[0]), frames_spec)
    except ValueError as exc:
        raise _CheckFailed(f"frames {frames_spec!r}: {exc}") from exc


def _compute(
    spec: CheckSpec, obtained: np.ndarray, reference: np.ndarray, extra: Mapping[str, Any]
) -> Any:
    try:
        cls = metrics.get(spec.metric)
    except HarnessError as exc:
        raise _CheckFailed(str(exc)) from exc
    try:
        reduce: Reduce = "mean" if spec.reduce == "mean" else "worst"
        # compare_margin is the comparison's setting (harness.compare.quality), not the metric's
        own = {k: v for k, v in spec.settings.items() if k != COMPARE_MARGIN}
        m = cls(reduce=reduce, **{**extra, **own})
    except TypeError as exc:
        raise _CheckFailed(
            f"{spec.metric} settings {dict(spec.settings)} are not accepted: {exc}"
        ) from exc
    not_run = getattr(metrics, "MetricNotRun", None)
    try:
        m.update(obtained, reference)
        return m.compute()
    except Exception as exc:  # a check records why it could not compute; it never escapes
        if not_run is not None and isinstance(exc, not_run):
            return MetricResult(
                name=spec.metric,
                value=None,
                unit="",
                higher_is_better=True,
                settings=dict(getattr(m, "settings", {})),
                status="not_run",
                skipped_reason=str(getattr(exc, "reason", exc)),
            )
        raise _CheckFailed(
            f"{spec.metric} could not be computed: {type(exc).__name__}: {exc}"
        ) from exc
