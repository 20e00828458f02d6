"""Quality of one case, base vs head: every frame of every output, each side against the
reference and head against base directly.

Which runs: the final attempt of each measured run (:func:`harness.model.finals`) that
recorded the output; failed runs included, since a NaN output fails its run and is exactly
what must be seen. Which outputs: every ``video``, ``image``, ``audio`` and ``tensor``
output, with each quality metric a check measured on it, or :data:`DEFAULT_METRIC` of its
kind where none did (a ``file`` output, such as an MP4 encoded from the arrays, is not
decoded). What is compared: whole outputs, every frame (not only the frames a check selects),
audio with its sample rate (:mod:`harness.compare.outputs`).

Verdict per output and metric:

- ``no_change``: head's outputs have base's content hashes (nothing is decoded);
- ``regression``: head holds NaN/Inf where base is finite; or, on any frame, head against the
  reference is worse than base against it by more than the metric's margin
  (:data:`DEFAULT_MARGINS`, overridden by the runner profile's ``[compare.margins]`` and then
  by the check's ``compare_margin`` setting; widened by base's own spread on that frame when
  its repeats differ), even when both sides pass their absolute checks. The finding names
  the frame and both values. Head's worst run is judged against base's median run;
- ``improvement``: no frame worse, and some frame better by more than the margin, unless the
  reference is *foreign*: a simulated platform judged against a reference blessed on another
  platform (the ``any`` fallback blessed on the CPU, say). Moving towards such a reference is
  ``changed``, and the finding says whose reference it is;
- ``changed``: the outputs differ, within the margin (the size is in ``head_vs_base``, the
  metric of head's output against base's, at its worst frame);
- ``missing``: a side has no output to compare.

Without the reference's files (no store, a re-blessed entry, a metric that cannot run) the
sides are judged on their checks' values, over the checks' frames, and the reason says so.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from harness import metrics
from harness.checks.quality import COMPARE_MARGIN, QUALITY_METRICS
from harness.compare.frames import Judged, finite_range, worse_by, worst_index
from harness.compare.outputs import (
    COMPARED_KINDS,
    DEFAULT_METRIC,
    Output,
    Unavailable,
    checked_reference,
    like_reference,
    load_output,
    metric_settings,
    per_frame,
    reference_array,
    reference_entry,
)
from harness.metrics import aggregate
from harness.metrics.audio import shared_alignment
from harness.model import Attempt, Case, QualityFinding, finals, fmt_number
from harness.references.store import ReferenceStore

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


@dataclass
class _Side:
    """One side's final attempts and the outputs read so far (by content hash)."""

    name: str
    finals: list[Attempt]
    root: Path
    loaded: dict[tuple[str, str], Output | Unavailable] = field(default_factory=dict)

    def recorded(self, output: str) -> dict[str, Attempt]:
        """The distinct contents of ``output`` (hash -> first attempt that recorded it)."""
        out: dict[str, Attempt] = {}
        for a in self.finals:
            h = (a.outputs.get(output) or {}).get("hash")
            if h:
                out.setdefault(str(h), a)
        return out

    def outputs(self, output: str) -> list[Output]:
        """Every distinct content of ``output``, decoded; :class:`Unavailable` if one is not."""
        got = []
        for h, a in self.recorded(output).items():
            key = (output, h)
            if key not in self.loaded:
                try:
                    self.loaded[key] = load_output(self.root, a, output)
                except Unavailable as exc:
                    self.loaded[key] = exc
            o = self.loaded[key]
            if isinstance(o, Unavailable):
                raise Unavailable(f"{self.name} {o}")
            got.append(o)
        return got


@dataclass(frozen=True)
class _Context:
    case: Case | None
    base: _Side
    head: _Side
    store: ReferenceStore | None
    margins: Mapping[str, float]
    simulated: bool
    platform: str


def quality_findings(
    case: Case | None,
    base: Sequence[Attempt],
    head: Sequence[Attempt],
    *,
    base_root: Path,
    head_root: Path,
    profile_margins: Mapping[str, float] | None = None,
    references: Path | None = None,
    simulated: bool = False,
) -> list[QualityFinding]:
    """One finding per (output, quality metric) that either side's checks measured, and one
    per other compared output (:data:`DEFAULT_METRIC`). ``references`` is the store the
    runs' checks read; ``simulated`` says the platform was simulated (its reference may then
    be foreign, see the module doc)."""
    bm, hm = finals(base), finals(head)
    store = ReferenceStore(references) if references is not None and references.is_dir() else None
    ctx = _Context(
        case,
        _Side("base", bm, base_root),
        _Side("head", hm, head_root),
        store,
        profile_margins or {},
        simulated,
        next((a.platform for a in [*hm, *bm]), ""),
    )
    with shared_alignment():  # the audio metrics of one pair of clips correlate them once
        return [_finding(ctx, output, metric) for output, metric in _pairs(bm, hm)]


def _pairs(bm: Sequence[Attempt], hm: Sequence[Attempt]) -> list[tuple[str, str]]:
    pairs: list[tuple[str, str]] = []
    for a in [*bm, *hm]:
        for c in a.checks:
            key = (str(c.output), c.metric)
            if c.metric in QUALITY_METRICS and c.output and key not in pairs:
                pairs.append(key)
    measured = {o for o, _m in pairs}
    for a in [*bm, *hm]:
        for name, info in a.outputs.items():
            kind = str(info.get("kind", "tensor"))
            if name not in measured and kind in COMPARED_KINDS:
                measured.add(name)
                pairs.append((name, DEFAULT_METRIC[kind]))
    return pairs


def _finding(ctx: _Context, output: str, metric: str) -> QualityFinding:
    higher = bool(metrics.get(metric).higher_is_better)
    margin, source = _margin(ctx.case, output, metric, ctx.margins)
    bvals = _values(ctx.base.finals, output, metric)
    hvals = _values(ctx.head.finals, output, metric)
    bhash, hhash = set(ctx.base.recorded(output)), set(ctx.head.recorded(output))
    identical = (bhash == hhash) if bhash and hhash else None
    spread = 0.0
    finite = [v for v in bvals if np.isfinite(v)]
    if len(bhash) > 1 and len(finite) > 1:
        spread = max(finite) - min(finite)
    kw: dict[str, Any] = {
        "higher_is_better": higher,
        "base_vs_ref": statistics.median(bvals) if bvals else None,
        "head_vs_ref": statistics.median(hvals) if hvals else None,
        "identical": identical,
        "base_spread": spread,
        "margin": margin + spread,
        "margin_source": source if not spread else f"{source} + base spread",
    }
    if identical is None:
        side = "base" if not bhash else "head"
        return QualityFinding(output, metric, "missing", reason=f"{side}: no '{output}'", **kw)
    if identical:
        return QualityFinding(output, metric, "no_change", **kw)
    try:
        b_out, h_out = ctx.base.outputs(output), ctx.head.outputs(output)
    except Unavailable as exc:
        return _on_checks(ctx, output, metric, kw, size=f"outputs differ ({exc})", why=None)
    settings = metric_settings(ctx.case, output, metric)
    size, h_vs_b, where, n = _direct(metric, h_out[0], b_out[0], settings)
    kw.update(head_vs_base=h_vs_b, worst_frame=where, frames=n)
    bad = _nonfinite(b_out, h_out)
    try:
        judged = _against_reference(ctx, output, metric, b_out, h_out, settings)
    except Unavailable as exc:
        if bad:
            return QualityFinding(output, metric, "regression", reason=f"{bad}; {size}", **kw)
        return _on_checks(ctx, output, metric, kw, size=size, why=str(exc))
    kw.update(judged.fields(margin, source))
    if bad:
        return QualityFinding(output, metric, "regression", reason=f"{bad}; {size}", **kw)
    verdict, frame, detail = judged.verdict(margin, metric)
    if frame is not None:
        kw["worst_frame"] = frame
    return QualityFinding(output, metric, verdict, reason=f"{size}; {detail}", **kw)


def _direct(
    metric: str, head: Output, base: Output, settings: Mapping[str, Any]
) -> tuple[str, float | None, int | None, int | None]:
    """The metric of head's output against base's at its worst frame: the reason's text,
    the value, the frame, and how many frames were compared."""
    if head.rate is not None and base.rate is not None and head.rate != base.rate:
        return f"sample rates differ: base {base.rate} Hz, head {head.rate} Hz", None, None, None
    try:
        per = per_frame(
            metric,
            _frames_of(head),
            _frames_of(base),
            rate=head.rate or base.rate,
            settings=settings,
        )
    except Unavailable as exc:
        return f"head vs base: {exc}", None, None, None
    value = aggregate(
        per, higher_is_better=bool(metrics.get(metric).higher_is_better), reduce="worst"
    )
    idx = worst_index(per, bool(metrics.get(metric).higher_is_better))
    text = f"head vs base {metric} {fmt_number(value)}"
    if len(per) > 1:
        text += f" (worst frame {idx} of {len(per)})"
    return text, value, idx if len(per) > 1 else None, len(per)


def _frames_of(out: Output) -> np.ndarray:
    """What a metric reads of an output: a tensor as one flat frame, anything else as is."""
    if out.kind == "tensor" and out.array.ndim not in (2, 3, 4):
        return out.array.reshape(1, -1)
    return out.array


def _nonfinite(b_out: Sequence[Output], h_out: Sequence[Output]) -> str | None:
    """Why head is a regression by content alone: NaN/Inf where base has none."""
    h = max(o.nonfinite for o in h_out)
    if h and not any(o.nonfinite for o in b_out):
        return f"head's output holds {h} NaN/Inf value(s), base's none"
    return None


def _against_reference(
    ctx: _Context,
    output: str,
    metric: str,
    b_out: Sequence[Output],
    h_out: Sequence[Output],
    settings: Mapping[str, Any],
) -> Judged:
    if ctx.store is None:
        raise Unavailable("no reference store")
    used = checked_reference([*ctx.base.finals, *ctx.head.finals], output)
    if used is None:
        raise Unavailable(f"no check recorded a reference for '{output}'")
    entry = reference_entry(ctx.store, *used)
    ref, rate = reference_array(ctx.store, entry, [*b_out, *h_out])

    def side(outs: Sequence[Output]) -> np.ndarray:
        return np.stack(
            [
                per_frame(metric, like_reference(o, entry), ref, rate=rate, settings=settings)
                for o in outs
            ]
        )

    b, h = side(b_out), side(h_out)
    higher = bool(metrics.get(metric).higher_is_better)
    foreign = ctx.simulated and ctx.platform not in (entry.platform_class, entry.blessed_on)
    return Judged(
        base=np.median(b, axis=0),
        head=(np.min(h, axis=0) if higher else np.max(h, axis=0)),  # NaN wins either way
        spread=finite_range(b),
        higher=higher,
        entry=entry,
        foreign=foreign,
    )


def _on_checks(
    ctx: _Context,
    output: str,
    metric: str,
    kw: dict[str, Any],
    *,
    size: str,
    why: str | None,
) -> QualityFinding:
    """The verdict from the checks' values (their frames only), when the reference's files
    cannot be read."""
    note = f"; vs reference on the checks' frames only ({why})" if why else ""
    b_ref, h_ref = kw["base_vs_ref"], kw["head_vs_ref"]
    if b_ref is None or h_ref is None:
        return QualityFinding(
            output, metric, "changed", reason=f"{size}; no reference value{note}", **kw
        )
    higher = bool(kw["higher_is_better"])
    worse = float(worse_by(np.asarray([b_ref]), np.asarray([h_ref]), higher)[0])
    total = float(kw["margin"])
    if worse > total:
        verdict, rel = "regression", f"worse than the margin {total:.4g}"
    elif -worse > total and not ctx.simulated:
        verdict, rel = "improvement", f"better than the margin {total:.4g}"
    elif -worse > total:
        # whose reference it is cannot be told without it: never an improvement
        verdict, rel = "changed", "closer, but the platform is simulated"
    else:
        verdict, rel = "changed", f"within {total:.4g}"
    reason = f"{size}; vs reference {fmt_number(b_ref)} -> {fmt_number(h_ref)} ({rel}){note}"
    return QualityFinding(output, metric, verdict, reason=reason, **kw)


def quality_verdict(findings: Sequence[QualityFinding]) -> str:
    """The case's quality verdict: regression > missing > improvement > no_change (a
    ``changed`` finding alone is no_change for the case; the findings keep it)."""
    verdicts = {f.verdict for f in findings}
    for v in ("regression", "missing", "improvement"):
        if v in verdicts:
            return v
    return "no_change"
