"""Latency statistics of a base-vs-head comparison: hand-computed cases, scipy as the reference
for the exact Mann-Whitney distribution and Fisher's test, invariants as properties, and seeded
simulations whose false-alarm rate and power are known in closed form."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from itertools import combinations

import numpy as np
import pytest
import scipy.integrate
import scipy.stats
from hypothesis import assume, given
from hypothesis import strategies as st
from sampling import within

from harness.compare.stats import (
    calibrate_noise,
    decide_latency,
    hodges_lehmann,
    mann_whitney_one_sided,
    margin_for,
    u_null_pmf,
)

MIRROR = {
    "regression": "improvement",
    "improvement": "regression",
    "no_change": "no_change",
    "inconclusive": "inconclusive",
}

latency = st.floats(min_value=0.5, max_value=2.0, allow_nan=False, allow_infinity=False)
samples = st.lists(latency, min_size=1, max_size=8)
# Values on a coarse grid, so that ties (and the exact tie-aware test) come up often.
grid_samples = st.lists(st.integers(1, 6).map(lambda i: 0.1 * i), min_size=1, max_size=7)


@st.composite
def shifted_pairs(draw: st.DrawFn) -> tuple[list[float], list[float]]:
    """Base and head where head is a scaled and perturbed copy: every verdict comes up."""
    base = draw(st.lists(latency, min_size=1, max_size=8))
    factor = draw(st.floats(min_value=0.6, max_value=1.6))
    size = draw(st.integers(1, 8))
    jitter = draw(st.lists(st.floats(0.97, 1.03), min_size=size, max_size=size))
    head = [base[i % len(base)] * factor * j for i, j in enumerate(jitter)]
    return base, head


pairs = st.one_of(
    st.tuples(samples, samples), shifted_pairs(), st.tuples(grid_samples, grid_samples)
)


def _scipy_p(x: list[float], y: list[float], alternative: str) -> float:
    return float(scipy.stats.mannwhitneyu(x, y, alternative=alternative, method="exact").pvalue)


def test_the_mad_constant_is_the_normal_quartile() -> None:
    """stats.py writes scipy.stats.norm.ppf(0.75) out rather than import scipy.stats for it."""
    from harness.compare import stats

    assert float(scipy.stats.norm.ppf(0.75)) == stats._Q3


def test_a_comparison_of_a_few_rounds_without_ties_never_imports_scipy_stats() -> None:
    """The decision rule's exact path needs no scipy.stats (its import costs ~0.5 s of CPU in
    every `harness compare`); a tie or a large sample imports it where it is used."""
    code = (
        "import sys\n"
        "from harness.compare.stats import decide_latency, mann_whitney_one_sided\n"
        "import harness.compare.latency, harness.compare.failures, harness.compare.noise\n"
        "decide_latency([1.0, 1.1, 1.2], [1.3, 1.4, 1.5])\n"
        "assert 'scipy.stats' not in sys.modules, 'imported for the exact path'\n"
        "mann_whitney_one_sided([1.0, 1.0, 1.2], [1.3, 1.0, 1.5])\n"
        "assert 'scipy.stats' in sys.modules, 'ties: rankdata'\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr


# --- exact null distribution of U ----------------------------------------------------------------


def test_u_distribution_by_hand() -> None:
    # 2 vs 2: the 6 orderings give U = 0, 1, 2, 2, 3, 4.
    assert (u_null_pmf(2, 2) * 6).tolist() == pytest.approx([1, 1, 2, 1, 1])
    # 3 vs 3: P(U = 0) = 1 / C(6, 3).
    assert u_null_pmf(3, 3)[0] == pytest.approx(1 / 20)
    assert u_null_pmf(0, 4).tolist() == [1.0]


@pytest.mark.parametrize(("m", "n"), [(1, 1), (1, 4), (2, 3), (3, 3), (4, 2), (3, 5), (4, 4)])
def test_u_distribution_matches_enumeration(m: int, n: int) -> None:
    counts = np.zeros(m * n + 1)
    for xs in combinations(range(m + n), m):
        ys = sorted(set(range(m + n)) - set(xs))
        counts[sum(x > y for x in xs for y in ys)] += 1
    np.testing.assert_allclose(u_null_pmf(m, n), counts / math.comb(m + n, m), rtol=1e-12)


@pytest.mark.parametrize(("m", "n"), [(1, 7), (3, 3), (5, 5), (7, 7), (9, 4), (12, 12)])
def test_u_distribution_sums_to_one_and_is_symmetric(m: int, n: int) -> None:
    pmf = u_null_pmf(m, n)
    assert pmf.sum() == pytest.approx(1.0, abs=1e-12)
    np.testing.assert_allclose(pmf, pmf[::-1], atol=1e-15)
    np.testing.assert_allclose(pmf, u_null_pmf(n, m), atol=1e-15)
    assert not pmf.flags.writeable


@pytest.mark.parametrize("m", range(1, 11))
@pytest.mark.parametrize("n", [1, 2, 3, 5, 7, 10])
def test_exact_p_equals_scipy_exact(m: int, n: int) -> None:
    rng = np.random.default_rng(100 * m + n)
    for _ in range(5):
        base = list(rng.lognormal(0.0, 0.1, m))
        head = list(rng.lognormal(rng.choice([-0.1, 0.0, 0.1]), 0.1, n))
        for alt in ("greater", "less"):
            ours = mann_whitney_one_sided(base, head, alt)
            assert ours == pytest.approx(_scipy_p(head, base, alt), rel=1e-12, abs=1e-15)


@given(samples, samples)
def test_exact_p_equals_scipy_exact_property(base: list[float], head: list[float]) -> None:
    assume(len(set(base + head)) == len(base) + len(head))
    for alt in ("greater", "less"):
        ours = mann_whitney_one_sided(base, head, alt)
        assert ours == pytest.approx(_scipy_p(head, base, alt), rel=1e-12, abs=1e-15)


def test_full_separation_at_three_rounds_is_p_one_twentieth() -> None:
    base, head = [1.00, 1.01, 0.99], [1.12, 1.13, 1.11]
    assert mann_whitney_one_sided(base, head, "greater") == pytest.approx(0.05, rel=1e-12)
    assert _scipy_p(head, base, "greater") == pytest.approx(0.05, rel=1e-12)
    assert mann_whitney_one_sided(base, head, "less") == pytest.approx(1.0)


def test_ties_get_the_exact_conditional_test() -> None:
    # Pooled 1 1 1 1 1 2: midranks 3 (five times) and 6; the head's rank sum is 12 exactly when
    # the 2 is among its 3 values, which happens in half of the C(6, 3) splits.
    base, head = [1.0, 1.0, 1.0], [1.0, 1.0, 2.0]
    assert mann_whitney_one_sided(base, head, "greater") == pytest.approx(0.5)
    assert mann_whitney_one_sided(base, head, "less") == pytest.approx(1.0)
    # scipy's "exact" p ignores the ties, so it is not this number; a full permutation test is.
    assert _scipy_p(head, base, "greater") != pytest.approx(0.5)
    perm = scipy.stats.mannwhitneyu(
        head, base, alternative="greater", method=scipy.stats.PermutationMethod(n_resamples=np.inf)
    )
    assert float(perm.pvalue) == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("base", "head"),
    [
        ([1.0, 1.1, 1.1, 1.3], [1.1, 1.2, 1.3, 1.3]),
        ([2.0, 2.0, 2.5], [2.0, 2.5, 2.5, 3.0, 3.0]),
        ([1.0, 1.2, 1.2, 1.2, 1.4], [1.2, 1.4]),
    ],
)
def test_tied_p_equals_scipy_permutation_test(base: list[float], head: list[float]) -> None:
    exact = scipy.stats.PermutationMethod(n_resamples=np.inf)
    for alt in ("greater", "less"):
        ref = scipy.stats.mannwhitneyu(head, base, alternative=alt, method=exact).pvalue
        assert mann_whitney_one_sided(base, head, alt) == pytest.approx(float(ref), rel=1e-12)


def test_identical_samples_give_no_evidence_either_way() -> None:
    xs = [1.0, 1.2, 0.9, 1.1]
    assert mann_whitney_one_sided(xs, xs, "greater") >= 0.5
    assert mann_whitney_one_sided(xs, xs, "less") >= 0.5


# --- Hodges-Lehmann ---------------------------------------------------------------------------


def test_hodges_lehmann_two_by_two_by_hand() -> None:
    # log differences 0.2, 0.1, 0.5, 0.4: median 0.3; 2 vs 2 is too small for a 90 % interval.
    r = hodges_lehmann(np.exp([0.0, 0.1]).tolist(), np.exp([0.2, 0.5]).tolist())
    assert r.ratio == pytest.approx(math.exp(0.3), rel=1e-12)
    assert (r.ci_low, r.ci_high) == (0.0, math.inf)


def test_hodges_lehmann_three_by_three_by_hand() -> None:
    # differences -0.1 -0.05 0.1 0.15 0.2 0.25 0.3 0.5 0.6: median 0.2. P(U = 0) = 0.05, so the
    # 90 % interval is [smallest, largest] difference.
    r = hodges_lehmann(np.exp([0.0, 0.1, 0.3]).tolist(), np.exp([0.2, 0.25, 0.6]).tolist())
    assert r.ratio == pytest.approx(math.exp(0.2), rel=1e-12)
    assert r.ci_low == pytest.approx(math.exp(-0.1), rel=1e-12)
    assert r.ci_high == pytest.approx(math.exp(0.6), rel=1e-12)
    assert r.confidence == 0.90
    # An 80 % interval drops one difference at each end: P(U <= 1) = 0.1.
    r80 = hodges_lehmann(
        np.exp([0.0, 0.1, 0.3]).tolist(), np.exp([0.2, 0.25, 0.6]).tolist(), confidence=0.80
    )
    assert (r80.ci_low, r80.ci_high) == pytest.approx((math.exp(-0.05), math.exp(0.5)))


def test_hodges_lehmann_five_by_five_order_statistics() -> None:
    # P(U <= 4) = 12/252 <= 0.05 < P(U <= 5) = 19/252: the interval is D(5) .. D(21) of 25.
    rng = np.random.default_rng(5)
    base, head = rng.lognormal(0, 0.1, 5), rng.lognormal(0.05, 0.1, 5)
    d = np.sort(np.subtract.outer(np.log(head), np.log(base)).ravel())
    r = hodges_lehmann(list(base), list(head))
    assert r.ratio == pytest.approx(math.exp(d[12]))
    assert (r.ci_low, r.ci_high) == pytest.approx((math.exp(d[4]), math.exp(d[20])))


def test_hodges_lehmann_is_a_ratio() -> None:
    base = [1.0, 1.3, 0.8, 1.1]
    r = hodges_lehmann(base, [2 * v for v in base])
    assert r.ratio == pytest.approx(2.0)
    assert r.ci_low <= 2.0 <= r.ci_high


@given(samples, samples)
def test_interval_and_test_agree(base: list[float], head: list[float]) -> None:
    # Built on one null distribution: the lower bound exceeds 1 exactly when scipy's exact
    # one-sided p is at most 5 % (no ties), and symmetrically for the upper bound.
    assume(len(set(base + head)) == len(base) + len(head))
    r = hodges_lehmann(base, head)
    assert (r.ci_low > 1.0) == (_scipy_p(head, base, "greater") <= 0.05 * (1 + 1e-9))
    assert (r.ci_high < 1.0) == (_scipy_p(head, base, "less") <= 0.05 * (1 + 1e-9))


def test_interval_coverage_simulated() -> None:
    # Skewed noise, true ratio 1.1: the 90 % interval misses the truth at most 10 % of the time
    # (2 * P(U <= k - 1) = 2 * 0.047 at 6 vs 6, U being discrete), and it is not so wide that
    # it never misses.
    rng = np.random.default_rng(7)
    trials = 1000
    misses = 0
    for _ in range(trials):
        base = rng.gamma(3.0, 1.0, 6)
        head = rng.gamma(3.0, 1.0, 6) * 1.1
        r = hodges_lehmann(list(base), list(head))
        misses += not (r.ci_low <= 1.1 <= r.ci_high)
    nominal = 2 * float(u_null_pmf(6, 6).cumsum()[7])
    assert nominal <= 0.10
    assert within(misses / trials, nominal, trials)


# --- the decision ---------------------------------------------------------------------------------


def test_three_rounds_full_separation_is_a_regression() -> None:
    d = decide_latency([1.00, 1.01, 0.99], [1.12, 1.13, 1.11])
    assert d.verdict == "regression"
    assert d.p_regression == pytest.approx(0.05)
    assert d.p == d.p_regression
    assert (d.n_base, d.n_head, d.margin) == (3, 3, 0.05)
    assert d.ratio == pytest.approx(1.12, rel=1e-3)
    assert d.ci_low > 1.0


def test_three_rounds_with_one_overlap_is_not_a_regression() -> None:
    # One base run (1.16) is slower than one head run (1.15): U' = 1, p = 2/20.
    d = decide_latency([1.00, 1.01, 1.16], [1.15, 1.17, 1.18])
    assert d.p_regression == pytest.approx(0.10)
    assert d.ratio > 1.05
    assert d.verdict == "inconclusive"


def test_full_separation_below_the_margin_is_not_a_regression() -> None:
    d = decide_latency([1.000, 1.001, 0.999], [1.020, 1.021, 1.019])
    assert d.p_regression == pytest.approx(0.05)
    assert d.verdict == "no_change"


def test_improvement_and_no_change() -> None:
    assert decide_latency([1.12, 1.13, 1.11], [1.00, 1.01, 0.99]).verdict == "improvement"
    d = decide_latency([1.00, 1.01, 0.99, 1.0, 1.02], [1.01, 0.99, 1.0, 1.02, 1.0])
    assert d.verdict == "no_change"
    assert d.ci_low >= 1 / 1.05 and d.ci_high <= 1.05


def test_noise_widens_the_margin() -> None:
    base, head = [1.00, 1.01, 0.99], [1.10, 1.11, 1.09]
    assert decide_latency(base, head).verdict == "regression"
    d = decide_latency(base, head, noise=0.045)
    assert d.margin == pytest.approx(0.09)
    assert d.verdict == "inconclusive"
    assert decide_latency(base, head, noise=0.01).margin == 0.05
    assert margin_for(0.05, None) == 0.05
    assert margin_for(0.05, 0.03) == pytest.approx(0.06)
    assert margin_for(0.05, 0.5) == pytest.approx(0.20)  # capped


def test_alpha_too_small_for_three_rounds_never_decides() -> None:
    d = decide_latency([1.00, 1.01, 0.99], [1.5, 1.6, 1.7], alpha=0.01)
    assert d.verdict == "inconclusive"
    assert (d.ci_low, d.ci_high) == (0.0, math.inf)


def test_a_single_hiccup_flags_instability_but_does_not_decide() -> None:
    base, head = [1.0, 1.01, 0.99, 1.0, 1.02], [1.0, 1.01, 1.9, 0.99, 1.0]
    d = decide_latency(base, head)
    assert d.unstable
    assert d.unstable_reason is not None and "head: max is 1.90x the median" in d.unstable_reason
    assert d.verdict != "regression"  # a mean would have said +18 %
    assert "unstable" in d.explain()


def test_wide_spread_flags_instability() -> None:
    d = decide_latency([1.0, 1.1, 0.9, 1.05, 0.95], [1.0, 1.01, 0.99, 1.0, 1.0])
    assert d.unstable and d.unstable_reason is not None
    assert d.unstable_reason.startswith("base: robust CV")
    assert not decide_latency([1.0, 1.001, 0.999], [1.0, 1.001, 0.999]).unstable


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"base": []}, "base: expected a non-empty"),
        ({"head": [1.0, -1.0]}, "head: latencies must be positive"),
        ({"head": [1.0, float("nan")]}, "head: latencies must be positive"),
        ({"base": [[1.0]]}, "base: expected a non-empty 1-D"),
        ({"base": ["fast"]}, "base: expected a sequence of latencies"),
        ({"alpha": 0.5}, "alpha: expected a float in (0, 0.5)"),
        ({"delta": 0.0}, "delta: expected a positive finite float"),
        ({"noise": -0.01}, "noise: expected a non-negative finite float"),
    ],
)
def test_bad_arguments_are_named(kwargs: dict[str, object], needle: str) -> None:
    args: dict[str, object] = {"base": [1.0, 1.1], "head": [1.0, 1.2], **kwargs}
    with pytest.raises(ValueError, match=re.escape(needle)):
        decide_latency(**args)  # type: ignore[arg-type]


def test_bad_arguments_elsewhere() -> None:
    with pytest.raises(ValueError, match="alternative"):
        mann_whitney_one_sided([1.0], [1.0], "two-sided")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="confidence"):
        hodges_lehmann([1.0], [1.0], confidence=1.0)
    with pytest.raises(ValueError, match="m: expected a non-negative int"):
        u_null_pmf(-1, 3)
    with pytest.raises(ValueError, match="EXACT_U_LIMIT"):
        u_null_pmf(200, 200)


# --- properties -------------------------------------------------------------------------------


@given(samples)
def test_comparing_samples_with_themselves_is_never_a_change(xs: list[float]) -> None:
    d = decide_latency(xs, xs)
    assert d.verdict in ("no_change", "inconclusive")
    assert d.ratio == 1.0
    assert d.p_regression >= 0.5 and d.p_improvement >= 0.5


@given(samples, st.randoms(use_true_random=False))
def test_a_reordered_copy_is_never_a_change(xs: list[float], rnd: object) -> None:
    ys = list(xs)
    rnd.shuffle(ys)  # type: ignore[attr-defined]
    assert decide_latency(xs, ys).verdict in ("no_change", "inconclusive")


@given(pairs)
def test_swapping_base_and_head_mirrors_the_verdict(pair: tuple[list[float], list[float]]) -> None:
    base, head = pair
    d = decide_latency(base, head)
    s = decide_latency(head, base)
    assert s.verdict == MIRROR[d.verdict]
    assert s.ratio == pytest.approx(1 / d.ratio, rel=1e-12)
    assert s.ci_low == pytest.approx(_inverse(d.ci_high), rel=1e-12)
    assert s.ci_high == pytest.approx(_inverse(d.ci_low), rel=1e-12)
    assert (s.p_regression, s.p_improvement) == (d.p_improvement, d.p_regression)
    assert (s.n_base, s.n_head) == (d.n_head, d.n_base)
    assert s.unstable == d.unstable


@given(pairs, st.floats(min_value=1e-3, max_value=1e3))
def test_scaling_both_sides_leaves_the_verdict(
    pair: tuple[list[float], list[float]], factor: float
) -> None:
    base, head = pair
    scaled_base = [v * factor for v in base]
    scaled_head = [v * factor for v in head]
    d = decide_latency(base, head)
    # Rounding of v * factor and of the logs moves values by a few ulps: skip the knife-edge
    # cases where that alone could cross a threshold or merge two values into a tie.
    assume(len(set(scaled_base + scaled_head)) == len(set(base + head)))
    bound = math.log1p(d.margin)
    for edge in (math.log(d.ratio), math.log(max(d.ci_low, 1e-300)), math.log(d.ci_high)):
        assume(not math.isfinite(edge) or abs(abs(edge) - bound) > 1e-9)
    assume(
        all(
            abs(1.4826 * _mad(v) - d.margin / 2) > 1e-9 and abs(_peak(v) - 1.5) > 1e-9 for v in pair
        )
    )
    s = decide_latency(scaled_base, scaled_head)
    assert s.verdict == d.verdict
    assert s.ratio == pytest.approx(d.ratio, rel=1e-9)
    assert (s.p_regression, s.p_improvement) == (d.p_regression, d.p_improvement)
    assert s.unstable == d.unstable


def _inverse(x: float) -> float:
    return math.inf if x == 0.0 else 1.0 / x  # an unbounded interval mirrors to an unbounded one


def _mad(v: list[float]) -> float:
    med = float(np.median(v))
    return float(np.median(np.abs(np.asarray(v) - med))) / med


def _peak(v: list[float]) -> float:
    return max(v) / float(np.median(v))


# --- noise calibration ----------------------------------------------------------------------------


def test_noise_recovers_the_spread_of_one_run() -> None:
    rng = np.random.default_rng(11)
    first, second = rng.lognormal(0, 0.02, 1000), rng.lognormal(0, 0.02, 1000)
    cal = calibrate_noise(list(first), list(second))
    assert cal.noise == pytest.approx(0.02, rel=0.1)
    assert cal.ci_low <= 1.0 <= cal.ci_high
    assert cal.rounds == 1000


def test_noise_ignores_drift_and_hiccups() -> None:
    rng = np.random.default_rng(12)
    drift = np.exp(0.005 * np.arange(60))  # +0.5 % a round: +35 % over the run
    first, second = drift * rng.lognormal(0, 0.02, 60), drift * rng.lognormal(0, 0.02, 60)
    first[3] *= 1.8
    second[[25, 41]] *= 1.5
    assert calibrate_noise(list(first), list(second)).noise == pytest.approx(0.02, rel=0.2)
    # The spread within one side, or the standard deviation of d, would be several times that.
    assert float(np.std(np.log(first))) > 0.05
    assert float(np.std(np.log(second) - np.log(first))) / math.sqrt(2) > 0.05


def test_noise_by_hand() -> None:
    # d = log(1.0 / 1.0), log(1.2 / 1.1): median |d| = log(12 / 11) / 2.
    cal = calibrate_noise([1.0, 1.1], [1.0, 1.2])
    expected = math.log(12 / 11) / 2 / (math.sqrt(2) * 0.6744897501960817)
    assert cal.noise == pytest.approx(expected, rel=1e-9)
    assert calibrate_noise([1.0, 1.1, 1.2], [1.0, 1.1, 1.2]).noise == 0.0
    with pytest.raises(ValueError, match="at least 2 rounds"):
        calibrate_noise([1.0], [1.0])
    with pytest.raises(ValueError, match="one run of each side per round"):
        calibrate_noise([1.0, 1.1, 1.0], [1.0, 1.1])


def test_calibrated_noise_sets_a_sensible_margin() -> None:
    rng = np.random.default_rng(13)
    quiet = calibrate_noise(list(rng.lognormal(0, 0.02, 7)), list(rng.lognormal(0, 0.02, 7)))
    noisy = calibrate_noise(list(rng.lognormal(0, 0.08, 7)), list(rng.lognormal(0, 0.08, 7)))
    assert 0.05 <= margin_for(0.05, quiet.noise) < 0.07
    assert 0.10 < margin_for(0.05, noisy.noise) < 0.25
