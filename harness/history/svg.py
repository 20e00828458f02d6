"""Inline SVG of a series: a sparkline for the index, a chart with change points for a case.

Plain strings (numbers and escaped text only), so a page embeds them as they are: no script,
no external resource. A chart draws each run's value as a line (with the spread of its
measured attempts as a band for a stage), each change point as a shaded range from the last run
before it to the first after it, labelled with its step, and gives every change point and the
newest run a tooltip.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

from markupsafe import Markup

from harness.history.detect import ChangePoint
from harness.history.series import Series

__all__ = ["chart", "sparkline"]


def _scale(values: Sequence[float], lo: float, hi: float, top: float, height: float) -> list[float]:
    span = hi - lo or 1.0
    return [top + height - (v - lo) / span * height for v in values]


def _bounds(values: Sequence[float]) -> tuple[float, float]:
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return 0.0, 1.0
    lo, hi = min(finite), max(finite)
    if lo == hi:
        lo, hi = lo - (abs(lo) * 0.05 or 0.5), hi + (abs(hi) * 0.05 or 0.5)
    return lo, hi


def _poly(xs: Sequence[float], ys: Sequence[float]) -> str:
    return " ".join(f"{x:.1f},{y:.1f}" for x, y in zip(xs, ys, strict=True))


def sparkline(
    series: Series, cps: Sequence[ChangePoint], width: int = 90, height: int = 18
) -> Markup:
    vals = [p.value if math.isfinite(p.value) else 0.0 for p in series.points]
    if not vals:
        return Markup("")
    lo, hi = _bounds(vals)
    n = len(vals)
    xs = [1 + i * (width - 2) / max(n - 1, 1) for i in range(n)]
    ys = _scale(vals, lo, hi, 1, height - 2)
    marks = "".join(
        f'<line x1="{xs[c.index]:.1f}" y1="0" x2="{xs[c.index]:.1f}" y2="{height}" '
        f'class="{"cp-bad" if c.regression else "cp"}"/>'
        for c in cps
    )
    title = escape(f"{series.key.metric}: {n} run(s), last {vals[-1]:.4g}")
    return Markup(
        f'<svg class="spark" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'role="img" aria-label="{title}"><title>{title}</title>{marks}'
        f'<polyline points="{_poly(xs, ys)}"/></svg>'
    )


def chart(
    series: Series, cps: Sequence[ChangePoint], unit: str, width: int = 640, height: int = 130
) -> Markup:
    pts = series.points
    if not pts:
        return Markup("")
    vals = [p.value for p in pts]
    los = [p.lo if p.lo is not None else p.value for p in pts]
    his = [p.hi if p.hi is not None else p.value for p in pts]
    lo, hi = _bounds(vals + los + his)
    left, top, plot_w, plot_h = 56, 8, width - 64, height - 30
    n = len(pts)
    xs = [left + i * plot_w / max(n - 1, 1) for i in range(n)]
    y = _scale(vals, lo, hi, top, plot_h)
    parts = [
        f'<svg class="chart" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'role="img" aria-label="{escape(series.key.metric)} over {n} runs">'
    ]
    for c in cps:
        x0, x1 = xs[c.index - 1], xs[c.index]
        tip = escape(
            f"{c.step_text()} (p = {c.pvalue:.2g}) between {c.before.run.run_id} "
            f"({(c.before.run.commit or '?')[:12]}) and {c.after.run.run_id} "
            f"({(c.after.run.commit or '?')[:12]})"
        )
        cls = "cp-bad" if c.regression else "cp"
        parts.append(
            f'<g class="cpr"><title>{tip}</title><rect x="{x0:.1f}" y="{top}" width="'
            f'{max(x1 - x0, 2):.1f}" height="{plot_h}" class="{cls}"/><text x="{x1 + 2:.1f}" '
            f'y="{top + 10}" class="cpl">{escape(c.step_text())}</text></g>'
        )
    if series.key.kind == "stage" and any(a != b for a, b in zip(los, his, strict=True)):
        band = (
            _poly(xs, _scale(his, lo, hi, top, plot_h))
            + " "
            + _poly(xs[::-1], _scale(los[::-1], lo, hi, top, plot_h))
        )
        parts.append(f'<polygon points="{band}" class="band"/>')
    parts.append(f'<polyline points="{_poly(xs, y)}" class="line"/>')
    last = pts[-1]
    parts.append(
        f'<circle cx="{xs[-1]:.1f}" cy="{y[-1]:.1f}" r="2.5" class="last"><title>'
        f"{escape(last.run.run_id)}: {last.value:.4g} {escape(unit)}</title></circle>"
    )
    for v in (lo, hi):
        yy = _scale([v], lo, hi, top, plot_h)[0]
        parts.append(
            f'<text x="{left - 4}" y="{yy + 4:.1f}" class="ax" text-anchor="end">{v:.3g}</text>'
        )
    parts.append(
        f'<text x="{left}" y="{height - 6}" class="ax">{escape(pts[0].run.run_id)}</text>'
        f'<text x="{left + plot_w}" y="{height - 6}" class="ax" text-anchor="end">'
        f"{escape(last.run.run_id)}</text></svg>"
    )
    return Markup("".join(parts))
