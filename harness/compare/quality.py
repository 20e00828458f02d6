"""Quality of one case, base vs head: each metric against the reference on both sides, and
head's outputs against base's directly.

Verdict per output and metric:

- ``no_change``: head's output is bit-identical to base's;
- ``regression`` / ``improvement``: head vs reference is worse / better than base vs reference
  by more than the metric's margin (:data:`DEFAULT_MARGINS`, overridden by the runner profile's
  ``[compare.margins]`` and then by the check's ``compare_margin`` setting; the margin used and
  where it came from are recorded). When base's own repeats vary, their spread is added;
- ``changed``: the outputs differ, within the margin (the size is in ``head_vs_base``);
- ``missing``: a side has no output or value to compare.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness import metrics
from harness.checks.quality import AUDIO_METRICS, COMPARE_MARGIN, QUALITY_METRICS
from harness.fsio import read_array
from harness.model import Attempt, Case, QualityFinding

# Default margins per metric, in the metric's unit (PSNR/SNR in dB, SSIM and CLIP unitless,
# MAE/max_abs in 0..255 pixel levels, audio MAD in PCM units, LSD in dB).
DEFAULT_MARGINS: dict[str, float] = {
    "psnr": 1.0,
    "ssim": 0.002,
    "mae": 0.25,
    "max_abs": 1.0,
    "clip": 0.005,
    "audio_snr": 1.0,
    "audio_mad": 0.001,
    "audio_lsd": 0.05,
}


def _measured(attempts: Sequence[Attempt]) -> list[Attempt]:
    finals: dict[tuple[int, int], Attempt] = {}
    for a in attempts:
        if not a.warmup and a.status != "budget_declined":
            finals[(a.round, a.repeat)] = a
    return [finals[k] for k in sorted(finals)]


def _values(attempts: Sequence[Attempt], output: str, metric: str) -> list[float]:
    out = []
    for a in attempts:
        for c in a.checks:
            if c.metric == metric and c.output == output and isinstance(c.value, int | float):
                out.append(float(c.value))
    return out


def _margin(
    case: Case | None, output: str, metric: str, profile_margins: Mapping[str, float]
) -> tuple[float, str]:
    if case is not None:
        for spec in case.checks:
            same = spec.metric == metric and spec.output in (None, output)
            if same and COMPARE_MARGIN in spec.settings:
                return float(spec.settings[COMPARE_MARGIN]), "case"
    if metric in profile_margins:
        return float(profile_margins[metric]), "profile"
    return DEFAULT_MARGINS.get(metric, 0.0), "default"


def _load(root: Path, attempt: Attempt, output: str) -> np.ndarray | None:
    info = attempt.outputs.get(output)
    if not info or not info.get("path"):
        return None
    path = root / str(info["path"])
    if path.suffix != ".safetensors" or not path.is_file():
        return None
    return np.asarray(read_array(path))


def _direct(metric: str, head: np.ndarray, base: np.ndarray) -> tuple[float | None, str | None]:
    """The metric of head's output against base's: its worst frame, and where that is."""
    if head.shape != base.shape and metric not in AUDIO_METRICS:
        return None, f"shapes differ: base {list(base.shape)}, head {list(head.shape)}"
    try:
        m = metrics.get(metric)()
        m.update(head, base)
        r = m.compute()
    except Exception as exc:  # e.g. NaN in audio; reported, never raised
        return None, f"{metric}(head, base) could not be computed: {type(exc).__name__}: {exc}"
    per = r.per_frame
    if per and len(per) > 1 and r.value is not None:
        vals = np.asarray(per)
        idx = int(np.argmin(vals) if r.higher_is_better else np.argmax(vals))
        return float(r.value), f"worst frame {idx} of {len(per)}"
    return (float(r.value) if r.value is not None else None), None


def quality_findings(
    case: Case | None,
    base: Sequence[Attempt],
    head: Sequence[Attempt],
    *,
    base_root: Path,
    head_root: Path,
    profile_margins: Mapping[str, float] | None = None,
) -> list[QualityFinding]:
    """One finding per (output, quality metric) that either side's checks measured."""
    bm, hm = _measured(base), _measured(head)
    pairs: list[tuple[str, str]] = []
    for a in [*bm, *hm]:
        for c in a.checks:
            key = (str(c.output), c.metric)
            if c.metric in QUALITY_METRICS and c.output and key not in pairs:
                pairs.append(key)
    out = []
    for output, metric in pairs:
        out.append(
            _finding(case, bm, hm, output, metric, base_root, head_root, profile_margins or {})
        )
    return out


def _finding(
    case: Case | None,
    bm: Sequence[Attempt],
    hm: Sequence[Attempt],
    output: str,
    metric: str,
    base_root: Path,
    head_root: Path,
    profile_margins: Mapping[str, float],
) -> QualityFinding:
    higher = bool(metrics.get(metric).higher_is_better)
    margin, source = _margin(case, output, metric, profile_margins)
    bvals, hvals = _values(bm, output, metric), _values(hm, output, metric)
    b_ref = statistics.median(bvals) if bvals else None
    h_ref = statistics.median(hvals) if hvals else None
    bhash = {a.outputs.get(output, {}).get("hash") for a in bm} - {None}
    hhash = {a.outputs.get(output, {}).get("hash") for a in hm} - {None}
    base_identical = len(bhash) == 1
    identical = (bhash == hhash) if bhash and hhash else None
    spread = 0.0
    finite = [v for v in bvals if math.isfinite(v)]
    if not base_identical and len(finite) > 1:
        spread = max(finite) - min(finite)
    h_vs_b: float | None = None
    where: str | None = None
    if identical is False and bm and hm:
        b_arr, h_arr = _load(base_root, bm[0], output), _load(head_root, hm[0], output)
        if b_arr is not None and h_arr is not None:
            h_vs_b, where = _direct(metric, h_arr, b_arr)
    kw: dict[str, Any] = {
        "higher_is_better": higher,
        "base_vs_ref": b_ref,
        "head_vs_ref": h_ref,
        "head_vs_base": h_vs_b,
        "identical": identical,
        "base_spread": spread if not base_identical else 0.0,
        "margin": margin + spread,
        "margin_source": source if not spread else f"{source} + base spread",
    }
    if identical is None:
        side = "base" if not bhash else "head"
        return QualityFinding(output, metric, "missing", reason=f"{side}: no '{output}'", **kw)
    if identical:
        return QualityFinding(output, metric, "no_change", **kw)
    size = f"head vs base {metric} {h_vs_b:.6g}" if h_vs_b is not None else "outputs differ"
    if where:
        size += f" ({where})"
    if b_ref is None or h_ref is None or not (math.isfinite(b_ref) or math.isfinite(h_ref)):
        return QualityFinding(output, metric, "changed", reason=f"{size}; no reference value", **kw)
    worse = _worse_by(b_ref, h_ref, higher)
    total = margin + spread
    if worse > total:
        verdict, rel = "regression", "worse"
    elif -worse > total:
        verdict, rel = "improvement", "better"
    else:
        verdict, rel = "changed", "within"
    reason = f"{size}; vs reference {b_ref:.6g} -> {h_ref:.6g} " + (
        f"({rel} than the margin {total:.4g})" if rel != "within" else f"(within {total:.4g})"
    )
    return QualityFinding(output, metric, verdict, reason=reason, **kw)


def _worse_by(base: float, head: float, higher_is_better: bool) -> float:
    """How much worse head is than base (negative: better); inf-safe (identical to reference
    gives an infinite PSNR, which is a finite-vs-infinite comparison)."""
    if base == head:
        return 0.0
    d = (base - head) if higher_is_better else (head - base)
    return float(d) if math.isfinite(d) else (math.inf if d > 0 else -math.inf)


def quality_verdict(findings: Sequence[QualityFinding]) -> str:
    """The case's quality verdict: regression > missing > improvement > no_change (a
    ``changed`` finding alone is no_change for the case; the findings keep it)."""
    verdicts = {f.verdict for f in findings}
    for v in ("regression", "missing", "improvement"):
        if v in verdicts:
            return v
    return "no_change"
