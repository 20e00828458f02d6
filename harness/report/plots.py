"""Plots of the HTML report as inline SVG, drawn from numbers only (no plotting library, no
script): an audio waveform envelope, a per-stage latency strip plot of base and head by round,
and a per-frame metric line.

Every label that can come from a case is escaped here (:func:`markupsafe.escape`), so the SVG
returned as :class:`~markupsafe.Markup` is safe to put in a template as it is.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from markupsafe import Markup, escape

from harness.model import fmt_number

# One colour per side, the same in every plot and in the page's CSS legend.
COLOURS = {"reference": "#6b7280", "output": "#2563eb", "base": "#9333ea", "head": "#ea580c"}


def _f(x: float) -> str:
    return f"{x:.1f}"


def waveform(
    pcm: np.ndarray, sample_rate: int, *, label: str, colour: str, width: int = 480
) -> Markup:
    """The min/max envelope of ``pcm`` (mono or ``[channels, samples]``, averaged to mono)
    in ``width`` columns, on a fixed +-1 full-scale axis, so two waveforms compare by eye."""
    mono = np.asarray(pcm, dtype=np.float64)
    if mono.ndim > 1:
        mono = mono.reshape(-1, mono.shape[-1]).mean(axis=0)
    mono = np.nan_to_num(mono.reshape(-1), nan=0.0, posinf=1.0, neginf=-1.0)
    height, mid = 72, 36
    cols = max(1, min(width, mono.size))
    edges = np.linspace(0, mono.size, cols + 1).astype(int)
    edges[-1] = mono.size
    lo = np.minimum.reduceat(mono, edges[:-1]) if mono.size else np.zeros(cols)
    hi = np.maximum.reduceat(mono, edges[:-1]) if mono.size else np.zeros(cols)
    xs = np.linspace(0, width, cols)
    top = " ".join(f"{_f(x)},{_f(mid - mid * min(1.0, v))}" for x, v in zip(xs, hi, strict=True))
    bottom = " ".join(
        f"{_f(x)},{_f(mid - mid * max(-1.0, v))}" for x, v in zip(xs[::-1], lo[::-1], strict=True)
    )
    seconds = mono.size / sample_rate if sample_rate else 0.0
    title = f"{label}: {mono.size} samples, {seconds:.2f} s at {sample_rate} Hz"
    return Markup(
        f'<svg class="plot wave" role="img" width="{width}" height="{height + 14}" '
        f'viewBox="0 0 {width} {height + 14}"><title>{escape(title)}</title>'
        f'<line x1="0" x2="{width}" y1="{mid}" y2="{mid}" stroke="#d1d5db"/>'
        f'<polygon points="{top} {bottom}" fill="{colour}" stroke="{colour}" '
        f'stroke-width="0.5"/>'
        f'<text x="2" y="{height + 12}" font-size="11">{escape(title)}</text></svg>'
    )


@dataclass(frozen=True)
class Point:
    """One measured latency: which side, which round, when (for the time order), seconds."""

    side: str
    round: int
    started_at: str
    seconds: float


def strip_plot(
    stage: str, points: Sequence[Point], *, caption: str = "", width: int = 420
) -> Markup:
    """Seconds per round for base and head, rounds left to right in the order they ran; the
    two sides of one round are joined by a grey line (the pairing), medians are dashed."""
    if not points:
        return Markup("")
    xi = _columns(points)
    n = max(xi.values()) + 1
    rounds = {p.round for p in points}
    height, pad_l, pad_b, pad_t = 120, 56, 18, 8
    secs = [p.seconds for p in points if math.isfinite(p.seconds)]
    lo, hi = (min(secs), max(secs)) if secs else (0.0, 1.0)
    span = (hi - lo) or max(hi, 1e-9) * 0.1
    lo, hi = max(0.0, lo - span * 0.1), hi + span * 0.1
    plot_w, plot_h = width - pad_l - 6, height - pad_b - pad_t

    def x(i: int, side: str) -> float:
        step = plot_w / max(n, 1)
        return pad_l + step * (i + 0.5) + (-4 if side == "base" else 4)

    def y(s: float) -> float:
        return pad_t + plot_h * (1 - (s - lo) / (hi - lo))

    parts = [
        f'<svg class="plot strip" role="img" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}"><title>{escape(stage)}: seconds per round</title>',
        f'<line x1="{pad_l}" x2="{pad_l}" y1="{pad_t}" y2="{pad_t + plot_h}" stroke="#9ca3af"/>',
        f'<text x="{pad_l - 4}" y="{_f(y(hi))}" font-size="10" text-anchor="end" '
        f'dominant-baseline="hanging">{escape(fmt_number(round(hi, 6)))} s</text>',
        f'<text x="{pad_l - 4}" y="{_f(y(lo))}" font-size="10" text-anchor="end">'
        f"{escape(fmt_number(round(lo, 6)))} s</text>",
    ]
    pairs: dict[int, dict[str, float]] = {}
    for p in points:
        i = xi[(p.side, p.started_at)]
        pairs.setdefault(i, {})[p.side] = p.seconds
    for i, sides in sorted(pairs.items()):
        if "base" in sides and "head" in sides:
            parts.append(
                f'<line x1="{_f(x(i, "base"))}" x2="{_f(x(i, "head"))}" '
                f'y1="{_f(y(sides["base"]))}" y2="{_f(y(sides["head"]))}" stroke="#d1d5db"/>'
            )
    for side in ("base", "head"):
        vals = [p.seconds for p in points if p.side == side]
        if vals:
            med = float(np.median(vals))
            parts.append(
                f'<line x1="{pad_l}" x2="{pad_l + plot_w}" y1="{_f(y(med))}" y2="{_f(y(med))}" '
                f'stroke="{COLOURS[side]}" stroke-dasharray="4 3" stroke-width="0.8"/>'
            )
    for p in points:
        i = xi[(p.side, p.started_at)]
        parts.append(
            f'<circle cx="{_f(x(i, p.side))}" cy="{_f(y(p.seconds))}" r="3" '
            f'fill="{COLOURS.get(p.side, "#000")}"><title>{escape(p.side)} round {p.round}: '
            f"{escape(fmt_number(p.seconds))} s</title></circle>"
        )
    axis = "rounds in the order they ran" if len(rounds) > 1 else "measured runs in order"
    parts.append(
        f'<text x="{pad_l}" y="{height - 4}" font-size="10">{escape(axis)}'
        f"{' - ' + escape(caption) if caption else ''}</text></svg>"
    )
    return Markup("".join(parts))


def _columns(points: Sequence[Point]) -> dict[tuple[str, str], int]:
    """The column of each point: its round's rank; without rounds (saved runs), its rank among
    its side's measured runs by start time, so repeat i of base sits beside repeat i of head."""
    rounds = sorted({p.round for p in points})
    if len(rounds) > 1:
        return {(p.side, p.started_at): rounds.index(p.round) for p in points}
    out: dict[tuple[str, str], int] = {}
    for side in {p.side for p in points}:
        mine = sorted((p for p in points if p.side == side), key=lambda p: p.started_at)
        out.update({(p.side, p.started_at): j for j, p in enumerate(mine)})
    return out


def _ticks(lo: float, hi: float, n: int = 4) -> list[float]:
    """About ``n`` round values from ``lo`` to ``hi`` (1, 2 or 5 times a power of ten apart)."""
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    return [first + k * step for k in range(int((hi - first) / step + 1e-9) + 1)]


def frame_line(
    metric: str,
    frames: Sequence[int],
    values: Sequence[float | None],
    threshold: float | None,
    op: str = ">=",
) -> Markup:
    """A metric over the compared frames, 480x200 with a value axis and a frame axis, the
    threshold as a red dashed line and the worst frame (the lowest for a ``>=`` check, the
    highest for ``<=``) marked and named. Infinite values (PSNR of identical frames) are drawn
    at the top of the axis and named in the caption."""
    pts = [
        (f, float(v))
        for f, v in zip(frames, values, strict=True)
        if isinstance(v, int | float) and not math.isnan(float(v))
    ]
    if len(pts) < 2:
        return Markup("")
    width, height = 480, 200
    left, right, top, bottom = 58, 12, 10, 40
    pw, ph = width - left - right, height - top - bottom
    finite = [v for _f_, v in pts if math.isfinite(v)]
    if threshold is not None and math.isfinite(threshold):
        finite.append(float(threshold))
    lo, hi = (min(finite), max(finite)) if finite else (0.0, 1.0)
    if hi == lo:
        lo, hi = lo - (abs(lo) * 0.01 or 0.5), hi + (abs(hi) * 0.01 or 0.5)
    pad = (hi - lo) * 0.08
    lo, hi = lo - pad, hi + pad
    f0, f1 = pts[0][0], pts[-1][0]

    def x(f: float) -> float:
        return left + pw * ((f - f0) / ((f1 - f0) or 1))

    def y(v: float) -> float:
        v = hi if math.isinf(v) else v
        return top + ph * (1 - (v - lo) / (hi - lo))

    parts = [
        f'<svg class="plot frames" role="img" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}"><title>{escape(metric)} per frame</title>',
        f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#9ca3af"/>',
    ]
    for t in _ticks(lo, hi):
        parts.append(
            f'<line x1="{left - 4}" x2="{left + pw}" y1="{_f(y(t))}" y2="{_f(y(t))}" '
            f'stroke="#e5e7eb"/><text x="{left - 6}" y="{_f(y(t) + 3)}" font-size="10" '
            f'text-anchor="end">{escape(fmt_number(round(t, 6)))}</text>'
        )
    for t in _ticks(f0, f1 if f1 > f0 else f0 + 1, 6):
        if f0 <= t <= f1 and float(t).is_integer():
            parts.append(
                f'<line x1="{_f(x(t))}" x2="{_f(x(t))}" y1="{top + ph}" y2="{top + ph + 4}" '
                f'stroke="#9ca3af"/><text x="{_f(x(t))}" y="{top + ph + 15}" font-size="10" '
                f'text-anchor="middle">{int(t)}</text>'
            )
    line = " ".join(f"{_f(x(f))},{_f(y(v))}" for f, v in pts)
    parts.append(f'<polyline points="{line}" fill="none" stroke="{COLOURS["output"]}"/>')
    if threshold is not None and math.isfinite(threshold):
        ty = _f(y(threshold))
        parts.append(
            f'<line class="threshold" x1="{left}" x2="{left + pw}" y1="{ty}" y2="{ty}" '
            f'stroke="#dc2626" stroke-dasharray="4 3"/><text x="{left + pw - 2}" '
            f'y="{_f(y(threshold) - 3)}" font-size="10" fill="#dc2626" text-anchor="end">'
            f"threshold {escape(op)} {escape(fmt_number(threshold))}</text>"
        )
    worst_f, worst_v = (min if op.startswith(">") else max)(pts, key=lambda p: (p[1], -p[0]))
    if len({v for _f_, v in pts}) > 1:  # every frame alike: no frame is the worst
        wx, wy = x(worst_f), y(worst_v)
        anchor = "end" if wx > left + pw / 2 else "start"
        parts.append(
            f'<circle class="worst" cx="{_f(wx)}" cy="{_f(wy)}" r="4" fill="#dc2626">'
            f"<title>worst: frame {worst_f}</title></circle>"
            f'<text x="{_f(wx + (-7 if anchor == "end" else 7))}" '
            f'y="{_f(min(wy + 14, top + ph - 3))}" font-size="10" text-anchor="{anchor}">'
            f"worst: frame {worst_f}, {escape(fmt_number(worst_v))}</text>"
        )
    inf = " (inf drawn at the top)" if any(math.isinf(v) for _f_, v in pts) else ""
    parts.append(
        f'<text x="{left}" y="{height - 6}" font-size="11">{escape(metric)} per frame, '
        f"frames {f0}-{f1}{inf}</text></svg>"
    )
    return Markup("".join(parts))
