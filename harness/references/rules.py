"""What bless refuses: unusable outputs (non-finite, blank, silent) and drift from the reference
an output would replace. The bounds are data here, in one place, so a reviewer can see them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from harness.errors import HarnessError, ReferenceStoreError
from harness.references.store import ReferenceEntry, ReferenceStore

__all__ = [
    "DRIFT_BOUNDS",
    "MIN_AUDIO_PEAK",
    "MIN_FRAME_STD",
    "drift_from",
    "output_meta",
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
) -> dict[str, Any]:
    """How far ``new`` is from the reference it replaces; refuses beyond the bounds."""
    try:
        ref = store.load(old)
    except HarnessError as exc:
        if force:
            return {"previous": f"unreadable: {exc}"}
        raise ReferenceStoreError(
            f"the reference it would replace cannot be read ({exc}); use --force to replace it"
        ) from exc
    drift: dict[str, Any] = {}
    problems: list[str] = []
    if tuple(ref.shape) != tuple(new.shape) or old.kind != kind:
        drift["shape"] = f"{old.kind} {list(ref.shape)} -> {kind} {list(new.shape)}"
        problems.append(f"shape changed from {list(ref.shape)} to {list(new.shape)}")
    elif kind in ("video", "image"):
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
    if problems and not force:
        raise ReferenceStoreError(
            f"output '{old.output}' drifts from the reference {old.key} it would replace: "
            + "; ".join(problems)
            + " (bounds: bless_rules.DRIFT_BOUNDS); check the change, then bless with --force "
            "and a --reason"
        )
    return drift


def _worst_ssim(a: np.ndarray, b: np.ndarray) -> float:
    from harness.metrics import ssim

    return float(np.min(ssim(a, b, data_range=255.0)))


def output_meta(info: Mapping[str, Any]) -> Mapping[str, Any]:
    """The ``meta`` table of an output record (fps, sample_rate), or an empty one."""
    meta = info.get("meta")
    return meta if isinstance(meta, Mapping) else {}
