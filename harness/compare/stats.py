"""Statistics of one latency comparison: base vs head on one runner, rounds in A B B A order.

Pure functions over plain sequences of latencies in seconds (one sample per round and side).
Everything is computed on log latency, so a shift is a ratio and the rule is scale-free.

- ``hodges_lehmann``: the shift (median of all pairwise log differences head - base) as a
  ratio, with a distribution-free interval from the exact Mann-Whitney null distribution.
- ``mann_whitney_one_sided``: the exact one-sided p that head is slower (or faster).
- ``decide_latency``: the rule of DESIGN.md "Deciding a latency difference" for one stage.
- ``holm``, ``spending``, ``family_level``: a case's judged stages held at one error rate
  together (Holm), that rate spread over the planned looks (alpha spending).
- ``calibrate_noise``: the base-vs-base noise that widens the margin on a noisy stage.
- ``head_fails_more_p``: Fisher's exact test for the failure matrix.

Example::

    >>> d = decide_latency([1.00, 1.01, 0.99], [1.12, 1.13, 1.11])
    >>> d.verdict, round(d.ratio, 2), d.p_regression
    ('regression', 1.12, 0.05)

The rank statistics themselves live in :mod:`harness.compare.ranks` and are re-exported here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from harness.compare.ranks import (
    EXACT_TIES_LIMIT,
    EXACT_U_LIMIT,
    Alternative,
    FloatArray,
    ShiftEstimate,
    _has_ties,
    _hl_log,
    _hl_sorted,
    _p_beyond,
    _p_greater,
    _samples,
    _significant,
    hodges_lehmann,
    mann_whitney_one_sided,
    sorted_median,
    u_null_pmf,
)

__all__ = [
    "EXACT_TIES_LIMIT",
    "EXACT_U_LIMIT",
    "MAX_MARGIN",
    "Alternative",
    "LatencyDecision",
    "NoiseCalibration",
    "ShiftEstimate",
    "Verdict",
    "calibrate_noise",
    "classify",
    "decide_latency",
    "family_level",
    "head_fails_more_p",
    "hodges_lehmann",
    "holm",
    "mann_whitney_one_sided",
    "margin_for",
    "one_sided_bounds",
    "smallest_p",
    "spending",
    "u_null_pmf",
]

Verdict = Literal["regression", "improvement", "no_change", "inconclusive"]

# The median of |Z| for a standard normal Z: the MAD is 0.6745 sigma for normal data
# (``scipy.stats.norm.ppf(0.75)``, written out: tests/compare/test_stats.py holds the two equal).
_Q3 = 0.6744897501960817


# --- the decision -------------------------------------------------------------------------------


@dataclass(frozen=True)
class LatencyDecision:
    """The verdict on one stage's latency, base vs head, and the numbers behind it.

    ``ratio``, ``ci_low`` and ``ci_high`` are the Hodges-Lehmann shift and its
    ``1 - 2 * alpha`` interval as ratios head / base (``ci_low = 0`` and ``ci_high = inf``
    when the rounds are too few for that level). ``p_regression`` / ``p_improvement`` are the
    exact one-sided Mann-Whitney p-values that head is slower / faster at all;
    ``p_above_margin`` / ``p_below_margin`` those that head is slower / faster by more than
    the margin (the p-values the rule decides on). ``level`` is the one-sided error rate the
    regression and improvement verdicts were held at. ``unstable`` says the samples on a side
    spread so much that the numbers deserve a look (``unstable_reason`` says which side and
    why); it does not change the verdict.
    """

    ratio: float
    ci_low: float
    ci_high: float
    p_regression: float
    p_improvement: float
    n_base: int
    n_head: int
    margin: float
    alpha: float
    verdict: Verdict
    unstable: bool
    unstable_reason: str | None
    p_above_margin: float = 1.0
    p_below_margin: float = 1.0
    level: float = 0.05
    inside: bool = False  # the two-sided interval lies inside +-margin

    @property
    def p(self) -> float:
        """The one-sided p in the direction of the observed shift (comparison.json's ``p``)."""
        return self.p_regression if self.ratio >= 1.0 else self.p_improvement

    def explain(self) -> str:
        """One line: the shift, its interval, the p-value and the margin behind the verdict."""
        text = (
            f"{self.verdict}: {self.ratio - 1:+.1%} [{self.ci_low - 1:+.1%}, "
            f"{self.ci_high - 1:+.1%}], p={self.p:.3g}, margin {self.margin:.1%}, "
            f"n={self.n_base}/{self.n_head}"
        )
        return f"{text}; unstable: {self.unstable_reason}" if self.unstable else text


# The widest margin calibrated noise can make: a runner whose stage scatters by 15 % would
# otherwise only count changes above 30 %, which hides real regressions instead of deciding them.
MAX_MARGIN = 0.20


def margin_for(delta: float, noise: float | None, *, cap: float = MAX_MARGIN) -> float:
    """The relative change that counts: ``max(delta, min(2 * noise, cap))``; ``delta`` without
    noise. ``cap`` keeps a noisy runner from widening the margin past what still matters."""
    if not (isinstance(delta, float | int) and math.isfinite(delta) and delta > 0):
        raise ValueError(f"delta: expected a positive finite float, got {delta!r}")
    if noise is None:
        return float(delta)
    if not (isinstance(noise, float | int) and math.isfinite(noise) and noise >= 0):
        raise ValueError(f"noise: expected a non-negative finite float or None, got {noise!r}")
    return max(float(delta), min(2.0 * float(noise), float(cap)))


def _instability(side: str, x: FloatArray, margin: float) -> list[str]:
    med = sorted_median(np.sort(x))
    reasons = []
    rcv = 1.4826 * sorted_median(np.sort(np.abs(x - med))) / med
    if rcv > margin / 2.0:
        reasons.append(f"{side}: robust CV {rcv:.1%} above half the margin ({margin / 2:.1%})")
    peak = float(x.max()) / med
    if peak > 1.5:
        reasons.append(f"{side}: max is {peak:.2f}x the median")
    return reasons


def decide_latency(
    base: Sequence[float],
    head: Sequence[float],
    *,
    delta: float = 0.05,
    noise: float | None = None,
    alpha: float = 0.05,
    level: float | None = None,
    cap: float = MAX_MARGIN,
) -> LatencyDecision:
    """Decide whether head's latency regressed, improved or did not change against base.

    ``base[i]`` and ``head[i]`` are the latencies (seconds) of one stage in round ``i``.
    ``margin = max(delta, min(2 * noise, cap))``, ``noise`` being :func:`calibrate_noise`'s
    estimate when known. With ``m = log(1 + margin)``:

    - regression: the one-sided ``1 - level`` interval of the log shift lies wholly above
      ``m`` (equivalently, the exact Mann-Whitney test of head / (1 + margin) against base
      gives ``p_above_margin <= level``): a point estimate above the margin is not enough;
    - improvement: the mirror image, wholly below ``-m``;
    - no_change: the two-sided ``1 - 2 * alpha`` interval lies inside ``[-m, m]``;
    - inconclusive otherwise: more rounds may decide.

    ``level`` defaults to ``alpha``; a caller judging a family of stages over several looks
    passes the level it spent on this one (:func:`holm`, :func:`family_level`). The decision
    never uses a mean or a single minimum.

        >>> decide_latency([1.00, 1.01, 0.99], [1.00, 0.99, 1.01]).verdict
        'no_change'
        >>> decide_latency([1.00, 1.01, 0.99], [1.04, 1.05, 1.06]).verdict  # above 5 %? unsure
        'inconclusive'
    """
    if not (isinstance(alpha, float | int) and 0.0 < alpha < 0.5):
        raise ValueError(f"alpha: expected a float in (0, 0.5), got {alpha!r}")
    lvl = float(alpha if level is None else level)
    if not 0.0 < lvl < 0.5:
        raise ValueError(f"level: expected a float in (0, 0.5), got {level!r}")
    margin = margin_for(delta, noise, cap=cap)
    b = _samples("base", base)
    h = _samples("head", head)
    # one table of pairwise log differences serves the shift, its interval and all four tests
    diffs = np.sort(np.subtract.outer(np.log(h), np.log(b)).ravel())
    m, n = int(b.size), int(h.size)
    shift, lo, hi = _hl_sorted(diffs, m, n, 1.0 - 2.0 * alpha)
    bound = math.log1p(margin)
    within = _has_ties(b) or _has_ties(h)
    p_above = _p_beyond(diffs, m, n, bound, within, lambda: _p_greater(h / (1.0 + margin), b))
    p_below = _p_beyond(
        diffs, m, n, bound, within, lambda: _p_greater(b, h * (1.0 + margin)), below=True
    )
    p_reg = _p_beyond(diffs, m, n, 0.0, within, lambda: _p_greater(h, b))
    p_imp = _p_beyond(diffs, m, n, 0.0, within, lambda: _p_greater(b, h), below=True)
    inside = bool(lo >= -bound and hi <= bound)
    verdict = classify(
        regression=_significant(p_above, lvl), improvement=_significant(p_below, lvl), inside=inside
    )
    reasons = _instability("base", b, margin) + _instability("head", h, margin)
    return LatencyDecision(
        ratio=math.exp(shift),
        ci_low=math.exp(lo),
        ci_high=math.exp(hi),
        p_regression=p_reg,
        p_improvement=p_imp,
        n_base=int(b.size),
        n_head=int(h.size),
        margin=margin,
        alpha=float(alpha),
        verdict=verdict,
        unstable=bool(reasons),
        unstable_reason="; ".join(reasons) or None,
        p_above_margin=p_above,
        p_below_margin=p_below,
        level=lvl,
        inside=inside,
    )


def classify(*, regression: bool, improvement: bool, inside: bool) -> Verdict:
    """One stage's verdict from the three tests of :func:`decide_latency`."""
    if regression:
        return "regression"
    if improvement:
        return "improvement"
    return "no_change" if inside else "inconclusive"


def one_sided_bounds(
    base: Sequence[float], head: Sequence[float], level: float
) -> tuple[float, float]:
    """The ratio head / base is above the first and below the second, each at ``1 - level``."""
    b, h = np.log(_samples("base", base)), np.log(_samples("head", head))
    _, lo, hi = _hl_log(b, h, 1.0 - 2.0 * level)
    return math.exp(lo), math.exp(hi)


# --- a family of stages over several looks -------------------------------------------------------


def holm(
    pvalues: Mapping[str, float], level: float, weights: Mapping[str, float] | None = None
) -> dict[str, float]:
    """Holm's step-down procedure: the hypotheses rejected with the family held at ``level``.

    Returns name -> the level that hypothesis was tested at (``level / k`` for the smallest p
    of ``k``, ``level / (k - 1)`` for the next, ... until one is not rejected). With
    ``weights`` (positive), the weighted form: each step tests the hypothesis with the
    smallest ``p / w`` at ``level * w / (sum of the weights not yet rejected)``. Either holds
    the family-wise error rate at ``level`` whatever the dependence between the tests (Holm,
    Scand. J. Statist. 6, 1979).

        >>> holm({"a": 0.001, "b": 0.02, "c": 0.5}, 0.05)
        {'a': 0.016666666666666666, 'b': 0.025}
    """
    w = {n: 1.0 for n in pvalues} if weights is None else {n: weights[n] for n in pvalues}
    if any(not v > 0 for v in w.values()):
        raise ValueError(f"weights: expected positive numbers, got {weights!r}")
    left = set(pvalues)
    out: dict[str, float] = {}
    while left:
        name = min(left, key=lambda n: (pvalues[n] / w[n], n))
        step = level * w[name] / sum(w[n] for n in left)
        if not _significant(pvalues[name], step):
            break
        out[name] = step
        left.remove(name)
    return out


def smallest_p(n_base: int, n_head: int) -> float:
    """The smallest exact one-sided Mann-Whitney p that ``n_base`` vs ``n_head`` can give."""
    return 1.0 / math.comb(n_base + n_head, n_base) if n_base and n_head else 1.0


def spending(looks: Sequence[int], alpha: float, *, rho: float = 3.0) -> tuple[float, ...]:
    """The error rate each planned look may spend: ``alpha * (t_j^rho - t_{j-1}^rho)`` with
    ``t_j = looks[j] / looks[-1]`` (the Kim-DeMets power family; ``rho = 3`` is close to
    O'Brien-Fleming's boundaries, ``rho = 1`` to Pocock's).

    Why spread it this way: at 3 rounds against 3 the exact test cannot go below p = 0.05, so
    alpha spent early mostly buys nothing; keeping most of it for the last look gives the
    power a 7-round batch can have, while a large effect still stops the batch at 5 rounds.
    The looks share ``alpha`` by the union bound, which holds whatever the dependence
    between looks.

        >>> [round(x, 4) for x in spending((3, 5, 7), 0.05)]
        [0.0039, 0.0143, 0.0318]
    """
    end = looks[-1]
    cum = [alpha * (n / end) ** rho for n in looks]
    return tuple(c - p for c, p in zip(cum, [0.0, *cum[:-1]], strict=True))


def family_level(
    looks: Sequence[int], look: int, alpha: float, k: int, *, rho: float = 3.0
) -> float:
    """The level the ``look``-th look (0-based) holds a family of ``k`` stages at.

    Its share of :func:`spending`, plus the shares of earlier looks that could not reject
    anything: a look whose smallest possible p at its planned size is above its share / k
    never rejects, so its share is still unspent and passes on (fewer rounds than planned only
    make that p larger). The sum over looks never exceeds ``alpha``.

        >>> round(family_level((3, 5, 7), 2, 0.05, 14), 4)
        0.05
    """
    shares = spending(looks, alpha, rho=rho)
    carried = 0.0
    for j in range(look):
        if smallest_p(looks[j], looks[j]) > (shares[j] + carried) / max(k, 1) * (1 + 1e-9):
            carried += shares[j]
        else:
            carried = 0.0
    return shares[look] + carried


# --- noise calibration --------------------------------------------------------------------------


@dataclass(frozen=True)
class NoiseCalibration:
    """Base-vs-base noise of one stage on one runner, from an A/A run.

    ``noise`` is the robust standard deviation of one run's log latency (for small values,
    its relative standard deviation): pass it as ``noise`` to :func:`decide_latency`.
    ``ratio``, ``ci_low`` and ``ci_high`` are the A/A Hodges-Lehmann shift and its 90 %
    interval; an A/A shift whose interval excludes 1 hints at an order effect on the runner.
    """

    noise: float
    ratio: float
    ci_low: float
    ci_high: float
    rounds: int


def calibrate_noise(first: Sequence[float], second: Sequence[float]) -> NoiseCalibration:
    """Noise of one stage from an A/A run: the same revision on both sides, A B B A order.

    ``first[i]`` and ``second[i]`` are the two runs of round ``i``. With
    ``d_i = log second_i - log first_i``, ``noise = median |d_i| / (sqrt(2) * 0.6745)``: for
    normal noise ``d_i`` has standard deviation ``sqrt(2) * sigma`` and ``|d_i|`` the median
    ``0.6745`` times that, so ``noise`` estimates ``sigma``, the standard deviation of one
    run's log latency. Why this:

    - it is the spread of a single run, a property of the stage and runner that does not
      shrink with more calibration rounds (an interval half-width would, and would make the
      margin depend on how long the calibration ran);
    - with ``margin = max(delta, 2 * noise)``, a stage whose runs scatter by 2 % keeps the
      configured 5 % margin, while one scattering by 8 % only counts changes above 16 %,
      which 3 to 7 rounds cannot resolve any finer without false alarms;
    - the two runs of a round are adjacent in time, so slow drift of the runner cancels in
      ``d`` as it does in the interleaved comparison (the spread within one side would count
      drift as noise and widen the margin for nothing);
    - a median ignores hiccups (a slow run spoils its round's ``d``) in up to half of the
      rounds; Shamos' pairwise estimator, more efficient on clean data, already breaks at 2
      spoilt rounds of 7, which 5 % hiccups cause in one calibration out of seven;
    - ``d`` is not centred first, so a systematic difference between the two sides of an A/A
      run (an order or slot effect) counts as noise, as it should.

    Use at least 5 rounds; 7 or more give a steadier figure.

        >>> round(calibrate_noise([1.0, 1.02, 0.98, 1.01], [0.99, 1.0, 1.02, 0.98]).noise, 3)
        0.026
    """
    a = _samples("first", first)
    b = _samples("second", second)
    if a.size != b.size or a.size < 2:
        raise ValueError(
            "calibrate_noise needs one run of each side per round and at least 2 rounds, "
            f"got {a.size} and {b.size} runs"
        )
    la, lb = np.log(a), np.log(b)
    noise = float(np.median(np.abs(lb - la))) / (math.sqrt(2.0) * _Q3)
    shift, lo, hi = _hl_log(la, lb, 0.90)
    return NoiseCalibration(
        noise=noise,
        ratio=math.exp(shift),
        ci_low=math.exp(lo),
        ci_high=math.exp(hi),
        rounds=int(a.size),
    )


# --- failure matrix -----------------------------------------------------------------------------


def head_fails_more_p(
    base_passed: int, base_failed: int, head_passed: int, head_failed: int
) -> float:
    """One-sided Fisher exact p that head fails more often than base.

    The 2x2 table is (failed, passed) for head and base; the p is the probability, with both
    margins fixed and no difference between sides, of head having at least as many failures
    as observed.

        >>> round(head_fails_more_p(base_passed=3, base_failed=0, head_passed=0, head_failed=3), 9)
        0.05
    """
    counts = {
        "base_passed": base_passed,
        "base_failed": base_failed,
        "head_passed": head_passed,
        "head_failed": head_failed,
    }
    for name, v in counts.items():
        if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 0:
            raise ValueError(f"{name}: expected a non-negative int, got {v!r}")
    if base_passed + base_failed == 0 or head_passed + head_failed == 0:
        raise ValueError("each side needs at least one attempt")
    table = [[head_failed, head_passed], [base_failed, base_passed]]
    import scipy.stats  # here, not at the top: see harness.compare.ranks

    return float(scipy.stats.fisher_exact(table, alternative="greater").pvalue)
