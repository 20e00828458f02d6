"""What bless refuses, in one place so a reviewer can see every rule and bound:

* a case: a simulated result, never (not even with ``force``); a case whose case-level checks
  failed (``identical_outputs`` across repeats, latency budgets), unless ``force``
  (:func:`refuse_case`);
* an output: non-finite, blank or silent content, never (:func:`refuse_unusable`); one whose
  attempt failed its own quality checks while a reference exists on the lookup chain, unless
  ``force`` (:func:`refuse_failed_checks`), which also confines the first-bless rule to outputs
  without a reference;
* drift from the reference the lookup chain uses now (:func:`lookup_chain`), unless ``force``
  (:func:`drift_from`): every quality check the attempt recorded on the output is re-run
  against that reference with its own op and threshold (worst frame over all frames, so never
  looser than the check), and :data:`DRIFT_BOUNDS` applies on top as a floor, also for outputs
  without checks.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from harness import metrics, platforms
from harness.errors import HarnessError, ReferenceStoreError
from harness.model import Attempt, CaseResult, CheckResult, compare, fmt_number
from harness.platforms.policy import resolve as resolve_policy
from harness.references.manifest import ANY, platform_chain
from harness.references.store import ReferenceEntry, ReferenceStore

__all__ = [
    "DRIFT_BOUNDS",
    "MIN_AUDIO_PEAK",
    "MIN_FRAME_STD",
    "drift_from",
    "lookup_chain",
    "output_meta",
    "quality_checks",
    "refuse_case",
    "refuse_failed_checks",
    "refuse_unusable",
]

MIN_FRAME_STD = 2.0  # per-frame pixel std on 0-255 below which a frame counts as blank
MIN_AUDIO_PEAK = 1e-4  # peak |sample| below which audio counts as silent
DRIFT_BOUNDS: Mapping[str, float] = {
    "video_mae_max": 8.0,  # worst-frame mean |diff| on 0-255
    "video_ssim_min": 0.9,  # worst-frame SSIM (harness.metrics.ssim defaults, data_range 255)
    "audio_snr_db_min": 20.0,  # SNR of the new audio against the old reference
    "tensor_rel_max_abs": 0.01,  # max |diff| / max(1, max |old|)
}


_FORCE_HINT = "check the change, then bless with --force and a --reason"


def lookup_chain(platform_class: str, platform: str) -> list[str]:
    """The platform classes a lookup for ``platform_class`` walks, most specific first: the
    reference a bless into ``platform_class`` must be compared with is the first entry on it.

    >>> lookup_chain("mi300x", "hip")   # a runner class of the result's platform
    ['mi300x', 'hip', 'any']
    >>> lookup_chain("hip", "hip"), lookup_chain("any", "hip")
    (['hip', 'any'], ['any'])
    """
    if platform_class == ANY:
        return [ANY]
    # The fallback after the class and its platform is platform policy (references.fallback).
    if platform_class in platforms.REGISTRY:
        return list(resolve_policy(platform_class).reference_chain(None))
    if platform not in platforms.REGISTRY:
        return platform_chain(platform, platform_class)
    return list(resolve_policy(platform).reference_chain(platform_class))


def quality_checks(attempt: Attempt, output: str | None = None) -> list[CheckResult]:
    """The attempt's recorded checks of registered quality metrics (on ``output`` if given)."""
    names = set(metrics.names())
    return [
        c for c in attempt.checks if c.metric in names and (output is None or c.output == output)
    ]


def refuse_case(result: CaseResult, force: bool) -> None:
    """Refuse a simulated result (always) or a case whose case-level checks failed."""
    if result.simulated:
        raise ReferenceStoreError(
            f"a simulated {result.platform} result can never be a reference: the platform was "
            f"not really there ({result.reason or 'simulated'}); bless a run on a real "
            f"{result.platform} machine (--force does not change this)"
        )
    # Case-level checks (identical_outputs, latency budgets) are the case's own checks that no
    # attempt carries: the manager adds them to the case after all attempts finished.
    own = {(c.name, c.metric, c.output) for a in result.attempts for c in a.checks}
    failed = [c for c in result.checks if c.blocking and (c.name, c.metric, c.output) not in own]
    if failed and not force:
        shown = "; ".join(f"{c.name}: {c.reason or fmt_number(c.value)}" for c in failed)
        raise ReferenceStoreError(
            f"the case failed its case-level check(s) {shown}; outputs of a failing case are "
            f"not pinned without --force ({_FORCE_HINT})"
        )


def refuse_failed_checks(
    attempt: Attempt,
    output: str,
    existing: ReferenceEntry | None,
    first_bless: bool,
    chain: Sequence[str],
    force: bool,
) -> None:
    """Refuse an output whose attempt failed its own quality checks while a reference exists.

    Without a reference every quality check fails, which is why bless may take such an
    attempt at all (``first_bless``); once ``existing`` is pinned on the lookup chain, a failed
    check means the output fails its case, and pinning it would hide a regression. A failed
    check that names no output counts against every output.
    """
    if existing is None or force:
        return
    failed = [
        c
        for c in attempt.checks
        if c.blocking and c.metric in set(metrics.names()) and c.output in (output, None)
    ]
    if not failed:
        return
    shown = "; ".join(f"{c.name}: {c.reason or fmt_number(c.value)}" for c in failed)
    if first_bless:
        why = (
            f"no measured attempt passed, and the last one that failed only quality checks "
            f"(#{attempt.index}) may be blessed only for outputs without a reference, but "
            f"'{output}' has {existing.key} on the lookup chain {list(chain)}"
        )
    else:
        why = f"attempt #{attempt.index} failed its own quality checks against {existing.key}"
    raise ReferenceStoreError(
        f"output '{output}': {why} ({shown}); pinning it would bless a regression; {_FORCE_HINT}"
    )


def refuse_unusable(name: str, kind: str, a: np.ndarray, info: Mapping[str, Any]) -> None:
    nonfinite = int(info.get("nonfinite") or 0)
    if a.dtype.kind in "fc":
        nonfinite = max(nonfinite, int(a.size - np.count_nonzero(np.isfinite(a))))
    if nonfinite:
        raise ReferenceStoreError(
            f"output '{name}' has {nonfinite} NaN/Inf value(s); a reference must be finite"
        )
    if kind in ("video", "image"):
        want = 4 if kind == "video" else 3
        if a.dtype != np.uint8 or a.ndim != want or a.shape[-1] != 3:
            raise ReferenceStoreError(
                f"output '{name}' is {a.dtype} {list(a.shape)}; a {kind} reference must be "
                f"uint8 {'[T, H, W, 3]' if kind == 'video' else '[H, W, 3]'}"
            )
        frames = a if kind == "video" else a[None]
        stds = frames.reshape(frames.shape[0], -1).astype(np.float64).std(axis=1)
        blank = [i for i, s in enumerate(stds) if s < MIN_FRAME_STD]
        if blank:
            shown = ", ".join(f"frame {i} std {stds[i]:.3f}" for i in blank[:5])
            raise ReferenceStoreError(
                f"output '{name}' has {len(blank)} blank or near-constant frame(s) "
                f"(std < {MIN_FRAME_STD} on 0-255): {shown}"
            )
    elif kind == "audio":
        if a.dtype.kind != "f" or a.ndim not in (1, 2) or a.size == 0:
            raise ReferenceStoreError(
                f"output '{name}' is {a.dtype} {list(a.shape)}; audio must be float [N] or [C, N]"
            )
        if a.ndim == 2 and a.shape[0] not in (1, 2):
            raise ReferenceStoreError(
                f"output '{name}' has shape {list(a.shape)}; audio must be [C, N] with 1 or 2 "
                "channels"
            )
        if not isinstance(output_meta(info).get("sample_rate"), int):
            raise ReferenceStoreError(f"output '{name}' records no integer meta.sample_rate")
        peak = float(np.max(np.abs(a)))
        if peak < MIN_AUDIO_PEAK:
            raise ReferenceStoreError(
                f"output '{name}' is silent (peak |sample| {peak:.3g} < {MIN_AUDIO_PEAK})"
            )


def drift_from(
    store: ReferenceStore,
    old: ReferenceEntry,
    kind: str,
    new: np.ndarray,
    info: Mapping[str, Any],
    force: bool,
    *,
    checks: Sequence[CheckResult] = (),
    replaces: bool = True,
    chain: Sequence[str] = (),
) -> dict[str, Any]:
    """How far ``new`` is from ``old``, the reference lookups use now; refuses beyond bounds.

    ``checks`` are the attempt's recorded quality checks on this output: each is re-run against
    ``old`` with its own op and threshold, so the bounds are never looser than the case's.
    ``replaces`` is False when ``old`` is a fallback on ``chain`` that the bless leaves in place.
    """
    try:
        ref = store.load(old)
    except HarnessError as exc:
        if force:
            return {"previous": f"unreadable: {exc}"}
        raise ReferenceStoreError(
            f"the reference {old.key} it would be compared with cannot be read ({exc}); "
            "use --force to bless anyway"
        ) from exc
    drift: dict[str, Any] = {} if replaces else {"against": old.key}
    problems: list[str] = []
    if tuple(ref.shape) != tuple(new.shape) or old.kind != kind:
        drift["shape"] = f"{old.kind} {list(ref.shape)} -> {kind} {list(new.shape)}"
        problems.append(f"shape changed from {list(ref.shape)} to {list(new.shape)}")
    else:
        problems += _builtin_drift(old, kind, new, ref, info, drift)
        problems += _case_drift(checks, new, ref, drift)
    if problems and not force:
        where = (
            f"the reference {old.key} it would replace"
            if replaces
            else f"{old.key}, the reference lookups on {list(chain)} use until now"
        )
        raise ReferenceStoreError(
            f"output '{old.output}' drifts from {where}: "
            + "; ".join(problems)
            + " (bounds: the case's own checks, with harness.references.rules.DRIFT_BOUNDS as "
            f"a floor); {_FORCE_HINT}"
        )
    return drift


def _builtin_drift(
    old: ReferenceEntry,
    kind: str,
    new: np.ndarray,
    ref: np.ndarray,
    info: Mapping[str, Any],
    drift: dict[str, Any],
) -> list[str]:
    """The :data:`DRIFT_BOUNDS` floor, for every output whatever its case checks."""
    problems: list[str] = []
    if kind in ("video", "image"):
        a = new if kind == "video" else new[None]
        b = ref if kind == "video" else ref[None]
        diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
        mae = float(diff.reshape(a.shape[0], -1).mean(axis=1).max())
        ssim = _worst_ssim(a, b)
        drift.update(worst_frame_mae=round(mae, 4), worst_frame_ssim=round(ssim, 6))
        if mae > DRIFT_BOUNDS["video_mae_max"]:
            bound = DRIFT_BOUNDS["video_mae_max"]
            problems.append(f"worst-frame mean abs diff {mae:.3f} > {bound}")
        if ssim < DRIFT_BOUNDS["video_ssim_min"]:
            problems.append(f"worst-frame SSIM {ssim:.4f} < {DRIFT_BOUNDS['video_ssim_min']}")
    elif kind == "audio":
        noise = float(np.sum((new.astype(np.float64) - ref.astype(np.float64)) ** 2))
        signal = float(np.sum(ref.astype(np.float64) ** 2))
        snr = math.inf if noise == 0 else 10 * math.log10(max(signal, 1e-30) / noise)
        drift["snr_db"] = snr if math.isinf(snr) else round(snr, 3)
        if snr < DRIFT_BOUNDS["audio_snr_db_min"]:
            problems.append(f"SNR {snr:.2f} dB < {DRIFT_BOUNDS['audio_snr_db_min']} dB")
        rate = output_meta(info).get("sample_rate")
        if old.sample_rate is not None and rate != old.sample_rate:
            drift["sample_rate"] = f"{old.sample_rate} -> {rate}"
            problems.append(f"sample rate changed from {old.sample_rate} to {rate}")
    else:
        diff = np.abs(new.astype(np.float64) - ref.astype(np.float64))
        scale = max(1.0, float(np.max(np.abs(ref))) if ref.size else 1.0)
        rel = float(diff.max() / scale) if diff.size else 0.0
        drift["rel_max_abs"] = rel
        if rel > DRIFT_BOUNDS["tensor_rel_max_abs"]:
            problems.append(
                f"max |diff| / max(1, max|ref|) = {rel:.4g} > {DRIFT_BOUNDS['tensor_rel_max_abs']}"
            )
        if str(new.dtype) != old.dtype:
            drift["dtype"] = f"{old.dtype} -> {new.dtype}"
            problems.append(f"dtype changed from {old.dtype} to {new.dtype}")
    return problems


# Recorded metric settings whose name differs from the metric's constructor argument.
_SETTING_ARGS = {"max_lag": "max_lag_samples"}


def _case_drift(
    checks: Sequence[CheckResult], new: np.ndarray, ref: np.ndarray, drift: dict[str, Any]
) -> list[str]:
    """Each recorded quality check, re-run on ``new`` against ``ref`` with its own threshold.

    The worst frame over all frames is taken whatever the check's ``frames`` and ``reduce``:
    that is at least as strict as the check itself. A ``warn`` check is recorded, not enforced,
    as in the case. CLIP is not recomputed here (it needs its model); its recorded verdict
    already decided :func:`refuse_failed_checks`.
    """
    problems: list[str] = []
    for c in checks:
        if c.metric == "clip" or c.threshold is None:
            drift[c.name] = "not recomputed at bless" + (" (CLIP)" if c.metric == "clip" else "")
            continue
        try:
            cls = metrics.get(c.metric)
            params = inspect.signature(cls.__init__).parameters
            kwargs = {
                p: c.settings[_SETTING_ARGS.get(p, p)]
                for p in params
                if p not in ("self", "reduce") and _SETTING_ARGS.get(p, p) in c.settings
            }
            m = cls(reduce="worst", **kwargs)
            m.update(new, ref)
            value = m.compute().value
        except Exception as exc:  # a metric that cannot run is a refusal, never a pass
            drift[c.name] = f"could not compute: {type(exc).__name__}: {exc}"
            problems.append(f"{c.name} could not be computed against the reference: {exc}")
            continue
        drift[c.name] = value if value is None or math.isinf(value) else round(value, 6)
        if c.policy == "fail" and not compare(value, c.op, c.threshold):
            problems.append(
                f"{c.name} {fmt_number(value)} (worst frame) is not {c.op} "
                f"{fmt_number(c.threshold)}, the case's own threshold"
            )
    return problems


def _worst_ssim(a: np.ndarray, b: np.ndarray) -> float:
    from harness.metrics import ssim

    return float(np.min(ssim(a, b, data_range=255.0)))


def output_meta(info: Mapping[str, Any]) -> Mapping[str, Any]:
    """The ``meta`` table of an output record (fps, sample_rate), or an empty one."""
    meta = info.get("meta")
    return meta if isinstance(meta, Mapping) else {}
