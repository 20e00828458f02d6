"""Statistics of one latency comparison: base vs head on one runner, rounds in A B B A order.

Pure functions over plain sequences of latencies in seconds (one sample per round and side).
Everything is computed on log latency, so a shift is a ratio and the rule is scale-free.

- ``hodges_lehmann``: the shift (median of all pairwise log differences head - base) as a
  ratio, with a distribution-free interval from the exact Mann-Whitney null distribution.
- ``mann_whitney_one_sided``: the exact one-sided p that head is slower (or faster).
- ``decide_latency``: the rule of DESIGN.md "Deciding a latency difference".
- ``calibrate_noise``: the base-vs-base noise that widens the margin on a noisy stage.
- ``head_fails_more_p``: Fisher's exact test for the failure matrix.

Example::

    >>> d = decide_latency([1.00, 1.01, 0.99], [1.12, 1.13, 1.11])
    >>> d.verdict, round(d.ratio, 2), d.p_regression
    ('regression', 1.12, 0.05)

Why a 90 % two-sided interval: each side of it is a 95 % one-sided bound, the same error rate
as the one-sided test at ``alpha = 0.05``. With both built on the same null distribution of U,
the lower bound of the shift is above zero exactly when ``p_regression <= alpha`` (without
ties), so the interval and the test never tell different stories.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import combinations
from typing import Literal, NamedTuple

import numpy as np
import numpy.typing as npt
import scipy.stats

Verdict = Literal["regression", "improvement", "no_change", "inconclusive"]
Alternative = Literal["greater", "less"]
FloatArray = npt.NDArray[np.float64]

# The probabilities here are exact rationals evaluated in floating point; comparing with a
# small relative tolerance lets p == alpha (1/20 at 3 vs 3 rounds) count as significant
# whatever the last bit of either number is.
_REL_TOL = 1e-9

# Largest m * n for which the null distribution of U is tabulated exactly (100 x 100 rounds);
# beyond it the normal approximation is accurate and the table would be slow to build.
EXACT_U_LIMIT = 10_000

# Largest number of splits enumerated for the exact test under ties (7 vs 7 rounds is 3432).
EXACT_TIES_LIMIT = 50_000

# The median of |Z| for a standard normal Z: the MAD is 0.6745 sigma for normal data.
_Q3 = float(scipy.stats.norm.ppf(0.75))


def _samples(name: str, values: Sequence[float]) -> FloatArray:
    """``values`` as a float array of positive, finite latencies, or a ValueError naming it."""
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(
            f"{name}: expected a sequence of latencies in seconds, got {values!r:.80}"
        ) from None
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(
            f"{name}: expected a non-empty 1-D sequence of latencies, got {values!r:.80}"
        )
    if not (np.all(np.isfinite(arr)) and np.all(arr > 0)):
        raise ValueError(f"{name}: latencies must be positive and finite, got {values!r:.80}")
    return arr


def _significant(p: float, alpha: float) -> bool:
    return p <= alpha * (1.0 + _REL_TOL)


# --- the exact null distribution of U ---------------------------------------------------------


@lru_cache(maxsize=256)
def _u_pmf(m: int, n: int) -> FloatArray:
    # U = #{(i, j): x_i > y_j}, |x| = m, |y| = n, no ties, all orderings equally likely.
    # The largest of the m + n values is an x with probability m / (m + n) and then beats all
    # n values of y; otherwise it is a y and adds nothing. So
    #   P_{m,n}(u) = m/(m+n) P_{m-1,n}(u - n) + n/(m+n) P_{m,n-1}(u),
    # a sum of non-negative terms, hence accurate in floating point.
    prev = [np.ones(1) for _ in range(n + 1)]  # m = 0: U = 0
    for i in range(1, m + 1):
        cur = [np.ones(1)]  # n = 0: U = 0
        for j in range(1, n + 1):
            p = np.zeros(i * j + 1)
            a = prev[j]
            p[j : j + a.size] += (i / (i + j)) * a
            b = cur[j - 1]
            p[: b.size] += (j / (i + j)) * b
            cur.append(p)
        prev = cur
    out = prev[n]
    out.flags.writeable = False
    return out


@lru_cache(maxsize=256)
def _u_cdf(m: int, n: int) -> FloatArray:
    # The distribution is symmetric in m and n; one table for both orders makes swapping base
    # and head swap the p-values bit for bit.
    cdf = np.cumsum(_u_pmf(*sorted((m, n))))
    cdf.flags.writeable = False
    return cdf


def u_null_pmf(m: int, n: int) -> FloatArray:
    """Exact null distribution of the Mann-Whitney U statistic for sample sizes m and n.

    Element ``u`` is ``P(U = u)`` for ``u = 0 .. m*n``, with ``U`` the number of pairs in which
    the first sample's value is the larger, no ties, and every ordering equally likely. The
    array is read-only (it is cached).

        >>> (u_null_pmf(2, 2) * 6).round().tolist()
        [1.0, 1.0, 2.0, 1.0, 1.0]
    """
    for name, v in (("m", m), ("n", n)):
        if not isinstance(v, int | np.integer) or v < 0:
            raise ValueError(f"{name}: expected a non-negative int, got {v!r}")
    if m * n > EXACT_U_LIMIT:
        raise ValueError(f"m * n = {m * n} is above EXACT_U_LIMIT ({EXACT_U_LIMIT})")
    return _u_pmf(*sorted((int(m), int(n))))


# --- Hodges-Lehmann shift -----------------------------------------------------------------------


class ShiftEstimate(NamedTuple):
    """Hodges-Lehmann shift of head over base as a ratio (>1: head slower), with its interval.

    ``ci_low`` is 0.0 and ``ci_high`` is inf when the samples are too small for the requested
    confidence (e.g. 2 vs 2 rounds at 90 %): no interval of that level exists.
    """

    ratio: float
    ci_low: float
    ci_high: float
    confidence: float


def _critical_k(m: int, n: int, confidence: float) -> int:
    """Largest k with P(U <= k - 1) <= (1 - confidence) / 2; 0 when even P(U = 0) is above it.

    The interval [D_(k), D_(mn+1-k)] of the sorted pairwise differences then covers the true
    shift with probability >= confidence (Lehmann, Nonparametrics, 1975, ch. 2).
    """
    one_side = (1.0 - confidence) / 2.0
    if m * n <= EXACT_U_LIMIT:
        cdf = _u_cdf(m, n)
        return int(np.count_nonzero(cdf <= one_side * (1.0 + _REL_TOL)))
    # Large samples: the normal approximation of U with continuity correction.
    mean = m * n / 2.0
    sd = math.sqrt(m * n * (m + n + 1) / 12.0)
    z = float(scipy.stats.norm.ppf(one_side))
    return max(0, math.floor(mean + z * sd + 0.5))


def _hl_log(
    base_log: FloatArray, head_log: FloatArray, confidence: float
) -> tuple[float, float, float]:
    diffs = np.sort(np.subtract.outer(head_log, base_log).ravel())
    shift = float(np.median(diffs))
    k = _critical_k(base_log.size, head_log.size, confidence)
    if k == 0:
        return shift, -math.inf, math.inf
    return shift, float(diffs[k - 1]), float(diffs[diffs.size - k])


def _check_confidence(confidence: float) -> None:
    if not (isinstance(confidence, float | int) and 0.0 < confidence < 1.0):
        raise ValueError(f"confidence: expected a float in (0, 1), got {confidence!r}")


def hodges_lehmann(
    base: Sequence[float], head: Sequence[float], *, confidence: float = 0.90
) -> ShiftEstimate:
    """Hodges-Lehmann shift of log latency, head over base, as a ratio with an interval.

    The shift is the median of all ``len(base) * len(head)`` differences
    ``log(head_j) - log(base_i)``; its interval is a pair of order statistics of those
    differences chosen from the exact null distribution of U, so it holds whatever the shape
    of the noise (given only that head is base shifted). The default 0.90 two-sided makes each
    side a 5 % one-sided bound, matching ``alpha = 0.05`` in :func:`decide_latency`.

        >>> r = hodges_lehmann([1.0, 1.0], [2.0, 2.0])
        >>> r.ratio, r.ci_low, r.ci_high
        (2.0, 0.0, inf)
    """
    _check_confidence(confidence)
    b = np.log(_samples("base", base))
    h = np.log(_samples("head", head))
    shift, lo, hi = _hl_log(b, h, float(confidence))
    return ShiftEstimate(math.exp(shift), math.exp(lo), math.exp(hi), float(confidence))


# --- one-sided Mann-Whitney U -------------------------------------------------------------------


@lru_cache(maxsize=64)
def _splits(m: int, n: int) -> npt.NDArray[np.intp]:
    idx = np.array(list(combinations(range(m + n), m)), dtype=np.intp)
    idx.flags.writeable = False
    return idx


def _p_greater_tied(x: FloatArray, y: FloatArray) -> float:
    # Exact conditional test: every split of the pooled values (with their midranks, ties
    # included) into m and n is equally likely under the null; p is the share of splits whose
    # U is at least the observed one. Midranks are multiples of 1/2, so the sums are exact.
    m = x.size
    ranks = scipy.stats.rankdata(np.concatenate([x, y]))
    observed = float(ranks[:m].sum())
    sums = ranks[_splits(m, y.size)].sum(axis=1)
    return float(np.count_nonzero(sums >= observed - 0.25)) / sums.size


def _p_greater(x: FloatArray, y: FloatArray) -> float:
    """P under the null that U(x over y) is at least its observed value."""
    m, n = x.size, y.size
    tied = np.unique(np.concatenate([x, y])).size < m + n
    if not tied and m * n <= EXACT_U_LIMIT:
        # P(U >= u) = P(U <= mn - u) by symmetry: the same table and the same tolerance as the
        # interval, so "lower bound above 1" and "p <= alpha" are one statement.
        u = int(np.count_nonzero(np.subtract.outer(x, y) > 0))
        return float(_u_cdf(m, n)[m * n - u])
    if tied and math.comb(m + n, m) <= EXACT_TIES_LIMIT:
        return _p_greater_tied(x, y)
    # Many samples: the (tie-corrected) normal approximation is accurate there.
    return float(scipy.stats.mannwhitneyu(x, y, alternative="greater", method="asymptotic").pvalue)


def mann_whitney_one_sided(
    base: Sequence[float], head: Sequence[float], alternative: Alternative = "greater"
) -> float:
    """One-sided p of the Mann-Whitney U test: ``"greater"``: head is slower than base;
    ``"less"``: head is faster.

    Without ties this is the exact p from the null distribution of U (:func:`u_null_pmf`),
    the value ``scipy.stats.mannwhitneyu(..., method="exact")`` returns (the tests hold the two
    equal), read from the table the interval of :func:`hodges_lehmann` uses. It is computed
    here rather than by calling scipy because scipy's call costs about a millisecond of
    argument handling, and the sequential rule makes many. Never the normal approximation,
    unless ``len(base) * len(head)`` exceeds ``EXACT_U_LIMIT``.

    With ties scipy's exact distribution (which assumes none) is not exact, so ties get the
    exact conditional test instead: all splits of the pooled midranks into base and head are
    enumerated (up to ``EXACT_TIES_LIMIT`` splits, 7 vs 7 rounds being 3432; beyond that, the
    tie-corrected normal approximation). Identical samples on both sides thus give p >= 0.5.

    Both directions are one computation with the roles swapped, so swapping base and head
    swaps the two p-values exactly.

        >>> mann_whitney_one_sided([1.0, 1.1, 1.2], [1.3, 1.4, 1.5])
        0.05
    """
    if alternative not in ("greater", "less"):
        raise ValueError(f"alternative: expected 'greater' or 'less', got {alternative!r}")
    b = _samples("base", base)
    h = _samples("head", head)
    return _p_greater(h, b) if alternative == "greater" else _p_greater(b, h)


# --- the decision -------------------------------------------------------------------------------


@dataclass(frozen=True)
class LatencyDecision:
    """The verdict on one stage's latency, base vs head, and the numbers behind it.

    ``ratio``, ``ci_low`` and ``ci_high`` are the Hodges-Lehmann shift and its
    ``1 - 2 * alpha`` interval as ratios head / base (``ci_low = 0`` and ``ci_high = inf``
    when the rounds are too few for that level). ``p_regression`` / ``p_improvement`` are the
    exact one-sided Mann-Whitney p-values that head is slower / faster. ``margin`` is the
    relative change that counts. ``unstable`` says the samples on a side spread so much that
    the numbers deserve a look (``unstable_reason`` says which side and why); it does not
    change the verdict.
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


def margin_for(delta: float, noise: float | None) -> float:
    """The relative change that counts: ``max(delta, 2 * noise)``, or ``delta`` without noise."""
    if not (isinstance(delta, float | int) and math.isfinite(delta) and delta > 0):
        raise ValueError(f"delta: expected a positive finite float, got {delta!r}")
    if noise is None:
        return float(delta)
    if not (isinstance(noise, float | int) and math.isfinite(noise) and noise >= 0):
        raise ValueError(f"noise: expected a non-negative finite float or None, got {noise!r}")
    return max(float(delta), 2.0 * float(noise))


def _instability(side: str, x: FloatArray, margin: float) -> list[str]:
    med = float(np.median(x))
    reasons = []
    rcv = 1.4826 * float(np.median(np.abs(x - med))) / med
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
) -> LatencyDecision:
    """Decide whether head's latency regressed, improved or did not change against base.

    ``base[i]`` and ``head[i]`` are the latencies (seconds) of one stage in round ``i``.
    ``margin = max(delta, 2 * noise)``, ``noise`` being :func:`calibrate_noise`'s estimate
    when known. With ``s`` the Hodges-Lehmann log shift and ``[lo, hi]`` its ``1 - 2 * alpha``
    interval:

    - regression: ``s > log(1 + margin)`` and ``p_regression <= alpha``;
    - improvement: ``s < -log(1 + margin)`` and ``p_improvement <= alpha``;
    - no_change: ``[lo, hi]`` lies inside ``[-log(1 + margin), log(1 + margin)]``;
    - inconclusive otherwise: more rounds may decide.

    At 3 vs 3 rounds the smallest one-sided p is 1/20 = 0.05, so only a full separation (every
    head slower than every base) can be a regression at ``alpha = 0.05``. The decision never
    uses a mean or a single minimum.

        >>> decide_latency([1.00, 1.01, 0.99], [1.00, 0.99, 1.01]).verdict
        'no_change'
    """
    if not (isinstance(alpha, float | int) and 0.0 < alpha < 0.5):
        raise ValueError(f"alpha: expected a float in (0, 0.5), got {alpha!r}")
    margin = margin_for(delta, noise)
    b = _samples("base", base)
    h = _samples("head", head)
    shift, lo, hi = _hl_log(np.log(b), np.log(h), 1.0 - 2.0 * alpha)
    p_reg = _p_greater(h, b)
    p_imp = _p_greater(b, h)
    bound = math.log1p(margin)
    verdict: Verdict
    if shift > bound and _significant(p_reg, alpha):
        verdict = "regression"
    elif shift < -bound and _significant(p_imp, alpha):
        verdict = "improvement"
    elif lo >= -bound and hi <= bound:
        verdict = "no_change"
    else:
        verdict = "inconclusive"
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
    )


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
    return float(scipy.stats.fisher_exact(table, alternative="greater").pvalue)
