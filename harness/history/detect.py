"""Change points of a series: Apache Otava (``apache-otava``), the E-Divisive means method
MongoDB's and DataStax's performance CI use, with Otava's t-test significance (Hunter).

Chosen over ``signal-processing-algorithms`` (MongoDB's E-Divisive with a permutation test) by
``bench/bench_history_detect.py`` on planted histories: that one finds small steps in quiet
series more often, but Otava is deterministic for the same data (a permutation test is not),
gives each change point a p-value, and is 7-15x faster on a 200-run series and ~100x on a
1,000-run one, which a nightly check of a thousand series needs (``docs/benchmarks.md``).

Latency is detected on log seconds (log-normal noise is symmetric there, and a step is a
ratio); a change point carries the commit range it lies in (the last run before, the first
after), its size (the ratio of the geometric means of the two segments, or the difference of
means for a pass rate or a check) and its p-value. Whether a step is a regression depends on
the series: slower latency, a lower pass rate, a check value moved toward its threshold (by
the check's op; ``==`` and others: any change).

Example::

    for cp in change_points(series):
        cp.before.run.commit, cp.after.run.commit, cp.step, cp.pvalue, cp.regression
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from harness.errors import InputError
from harness.history.series import Point, Series

__all__ = ["DEFAULT", "ChangePoint", "Settings", "change_points", "family_pvalue"]


@dataclass(frozen=True)
class Settings:
    max_pvalue: float = 0.001
    window: int = 100  # Otava's sliding window (points): 100 beat 30 and 50 on planted steps
    min_step: float = 0.02  # a smaller significant latency step is listed, never a regression
    min_after: int = 2  # points after a step before it counts (PyTorch HUD: two in a row)


DEFAULT = Settings()


@dataclass(frozen=True)
class ChangePoint:
    series: Series
    index: int  # the first point after the step
    before: Point  # the last point before it
    after: Point
    mean_before: float  # in the series' unit (a geometric mean for latency)
    mean_after: float
    step: float  # latency: relative (0.10 = +10 %); pass rate and checks: after - before
    pvalue: float
    regression: bool
    improvement: bool

    @property
    def relative(self) -> bool:
        return self.series.key.kind == "stage"

    def step_text(self) -> str:
        if self.relative:
            return f"{self.step:+.1%}"
        if self.series.key.kind == "pass":
            return f"{self.step * 100:+.0f} points of pass rate"
        return f"{self.mean_before:.6g} -> {self.mean_after:.6g}"


def family_pvalue(settings: Settings, series: int) -> float:
    """The p-value a change point must meet when ``series`` series are looked at together
    (Bonferroni): a thousand noisy series at p <= 0.001 each give false steps every night."""
    return settings.max_pvalue / max(series, 1)


def _otava() -> Any:
    try:
        from otava.analysis import compute_change_points
    except ImportError as exc:
        raise InputError(
            f"change points need Apache Otava ({exc}): pip install --no-deps apache-otava==0.8.0 "
            "(without its dependencies: their pins would downgrade numpy and scipy, and its "
            "analysis needs only those two)"
        ) from None
    return compute_change_points


def _direction(series: Series) -> int:
    """+1: higher is worse; -1: lower is worse; 0: any change is."""
    kind = series.key.kind
    if kind == "stage":
        return 1
    if kind == "pass":
        return -1
    if series.op in (">", ">="):
        return -1
    if series.op in ("<", "<="):
        return 1
    return 0


def change_points(series: Series, settings: Settings | None = None) -> list[ChangePoint]:
    """The change points of ``series`` (deterministic for the same points)."""
    settings = settings or DEFAULT
    pts = series.points
    vals = [p.value for p in pts]
    finite = [v for v in vals if math.isfinite(v)]
    if len(finite) != len(vals) or len(vals) < 4 or max(vals) == min(vals):
        if len(finite) != len(vals):
            pts = [p for p in pts if math.isfinite(p.value)]
            return change_points(Series(series.key, pts, series.op), settings) if pts else []
        return []
    log = series.key.kind == "stage"
    if log:
        if min(vals) <= 0:
            vals = [max(v, 1e-9) for v in vals]
        vals = [math.log(v) for v in vals]
    compute = _otava()
    found, _weak = compute(vals, window_len=settings.window, max_pvalue=settings.max_pvalue)
    direction = _direction(series)
    out = []
    for cp in found:
        i = int(cp.index)
        if i <= 0 or i >= len(pts) or len(pts) - i < settings.min_after:
            continue
        m1, m2 = float(cp.stats.mean_1), float(cp.stats.mean_2)
        if log:
            before, after = math.exp(m1), math.exp(m2)
            step = after / before - 1.0
            big = abs(step) >= settings.min_step
        else:
            before, after = m1, m2
            step = after - before
            big = step != 0
        worse = big and (step * direction > 0 if direction else True)
        better = big and direction != 0 and step * direction < 0
        out.append(
            ChangePoint(
                series=series,
                index=i,
                before=pts[i - 1],
                after=pts[i],
                mean_before=before,
                mean_after=after,
                step=step,
                pvalue=float(cp.stats.pvalue),
                regression=worse,
                improvement=better,
            )
        )
    return out
