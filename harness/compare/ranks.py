"""Rank statistics of two samples on log latency: the exact null distribution of the
Mann-Whitney U, the Hodges-Lehmann shift with its distribution-free interval, and the exact
one-sided test. Pure functions; :mod:`harness.compare.stats` builds the decision on them.

Why a 90 % two-sided interval: each side of it is a 95 % one-sided bound, the same error rate
as the one-sided test at ``alpha = 0.05``. With both built on the same null distribution of U,
the lower bound of the shift is above zero exactly when ``p_regression <= alpha`` (without
ties), so the interval and the test never tell different stories.

``scipy.stats`` is imported where it is used (ties, large samples, Fisher's test), not at the
top: its import costs ~0.5 s of CPU, and most comparisons of a few rounds without ties never
reach it (every ``harness compare`` paid it before, ~20 s of the test suite's CPU).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import lru_cache
from itertools import combinations
from typing import Literal, NamedTuple

import numpy as np
import numpy.typing as npt

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


def sorted_median(values: FloatArray) -> float:
    """The median of an already sorted array (``np.median`` without its overhead, which the
    sequential rule would pay thousands of times)."""
    n = values.size
    return float(values[n // 2]) if n % 2 else float(values[n // 2 - 1] + values[n // 2]) / 2.0


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
    import scipy.stats

    z = float(scipy.stats.norm.ppf(one_side))
    return max(0, math.floor(mean + z * sd + 0.5))


def _hl_log(
    base_log: FloatArray, head_log: FloatArray, confidence: float
) -> tuple[float, float, float]:
    diffs = np.sort(np.subtract.outer(head_log, base_log).ravel())
    return _hl_sorted(diffs, base_log.size, head_log.size, confidence)


def _hl_sorted(diffs: FloatArray, m: int, n: int, confidence: float) -> tuple[float, float, float]:
    """The shift and interval of :func:`_hl_log` from the sorted pairwise differences."""
    shift = sorted_median(diffs)
    k = _critical_k(m, n, confidence)
    if k == 0:
        return shift, -math.inf, math.inf
    return shift, float(diffs[k - 1]), float(diffs[diffs.size - k])


def _p_beyond(
    diffs: FloatArray,
    m: int,
    n: int,
    bound: float,
    tied: bool,
    exact: Callable[[], float],
    *,
    below: bool = False,
) -> float:
    """P under the null that ``#(diffs > bound)`` (``below``: ``#(diffs < -bound)``) is at
    least its observed value, for the sorted ``n * m`` differences ``log head_j - log base_i``:
    the U of head shifted down by ``bound`` over base (or of base over head shifted up). Read
    from the table without ties; ``exact()`` (:func:`_p_greater` on the shifted samples)
    where a tie makes the table inexact."""
    at = -bound if below else bound
    lo = int(np.searchsorted(diffs, at, side="left"))
    hi = int(np.searchsorted(diffs, at, side="right"))
    if tied or lo != hi or m * n > EXACT_U_LIMIT:
        return exact()
    u = lo if below else diffs.size - hi
    return float(_u_cdf(m, n)[m * n - u])


def _has_ties(values: FloatArray) -> bool:
    s = np.sort(values)
    return bool((s[1:] == s[:-1]).any())


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
    import scipy.stats

    ranks = scipy.stats.rankdata(np.concatenate([x, y]))
    observed = float(ranks[:m].sum())
    sums = ranks[_splits(m, y.size)].sum(axis=1)
    return float(np.count_nonzero(sums >= observed - 0.25)) / sums.size


def _p_greater(x: FloatArray, y: FloatArray) -> float:
    """P under the null that U(x over y) is at least its observed value."""
    m, n = x.size, y.size
    pooled = np.sort(np.concatenate([x, y]))
    tied = bool((pooled[1:] == pooled[:-1]).any())
    if not tied and m * n <= EXACT_U_LIMIT:
        # P(U >= u) = P(U <= mn - u) by symmetry: the same table and the same tolerance as the
        # interval, so "lower bound above 1" and "p <= alpha" are one statement.
        u = int((np.subtract.outer(x, y) > 0).sum())
        return float(_u_cdf(m, n)[m * n - u])
    if tied and math.comb(m + n, m) <= EXACT_TIES_LIMIT:
        return _p_greater_tied(x, y)
    # Many samples: the (tie-corrected) normal approximation is accurate there.
    import scipy.stats

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
