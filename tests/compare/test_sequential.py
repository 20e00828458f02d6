"""compare.sequential: looks at 3, 5 and 7 rounds, confirmation by a fresh batch, and the
round scheduler; with seeded simulations of the whole rule."""

from __future__ import annotations

import doctest
import math
from itertools import permutations

import numpy as np
import pytest
import scipy.integrate
import scipy.stats
from sampling import within

from harness.compare import sequential, stats
from harness.compare.sequential import (
    CaseProgress,
    compare_sequentially,
    plan_rounds,
    rounds_from,
    run_batch,
)
from harness.compare.stats import (
    decide_latency,
)

# --- sequential looks and confirmation ------------------------------------------------------------

QUIET = [1.00, 1.01, 0.99, 1.00, 1.02, 0.98, 1.01]


def test_a_clear_regression_is_decided_at_three_and_confirmed() -> None:
    r = compare_sequentially(rounds_from(QUIET[:6], [1.2 * v for v in QUIET[:6]]))
    assert r.verdict == "regression"
    assert (r.rounds, r.confirmation_rounds, r.total_rounds) == (3, 3, 6)
    assert r.detection.looks == (3,)
    assert r.confirmation is not None and r.confirmation.verdict == "regression"


def test_a_regression_the_fresh_batch_does_not_repeat_is_suspect() -> None:
    head = [1.2 * v for v in QUIET[:3]] + QUIET[3:6]
    r = compare_sequentially(rounds_from(QUIET[:6], head))
    assert r.verdict == "suspect"
    assert r.decision is not None and r.decision.verdict == "regression"
    assert "not confirmed: the fresh batch says no_change" in r.reason


def test_a_regression_without_rounds_left_to_confirm_is_suspect() -> None:
    r = compare_sequentially(rounds_from(QUIET[:4], [1.2 * v for v in QUIET[:4]]))
    assert r.verdict == "suspect"
    assert r.confirmation_rounds == 1
    assert "no rounds left to confirm" in r.reason


def test_inconclusive_at_three_buys_rounds_up_to_five() -> None:
    base = [1.00, 1.01, 1.16, 1.00, 0.99]
    head = [1.15, 1.17, 1.18, 1.16, 1.17]
    batch = run_batch(rounds_from(base, head))
    assert batch.looks == (3, 5)
    assert batch.decision is not None and batch.verdict == "regression"
    r = compare_sequentially(rounds_from(base, head), confirm=False)
    assert (r.verdict, r.rounds, r.confirmation) == ("regression", 5, None)


def test_undecided_after_seven_stays_inconclusive() -> None:
    base = [1.0, 1.3, 0.8, 1.2, 0.9, 1.25, 0.85]
    head = [1.1, 0.9, 1.3, 1.0, 1.2, 0.95, 1.15]
    r = compare_sequentially(rounds_from(base * 2, head * 2))
    assert r.verdict == "inconclusive"
    assert r.detection.looks == (3, 5, 7)
    assert r.total_rounds == 7


def test_too_few_rounds_for_a_look() -> None:
    r = compare_sequentially(rounds_from([1.0, 1.0], [1.0, 1.0]))
    assert (r.verdict, r.decision, r.rounds) == ("inconclusive", None, 2)
    assert "no look reached" in r.reason


def test_improvements_and_no_change_are_not_confirmed() -> None:
    r = compare_sequentially(rounds_from([1.2 * v for v in QUIET[:6]], QUIET[:6]))
    assert (r.verdict, r.confirmation_rounds) == ("improvement", 0)
    r = compare_sequentially(rounds_from(QUIET, QUIET[::-1]))
    assert r.verdict == "no_change" and r.confirmation is None


def test_looks_and_feeds_are_validated() -> None:
    with pytest.raises(ValueError, match="looks: expected increasing positive ints"):
        run_batch(rounds_from([1.0], [1.0]), looks=(3, 3))
    with pytest.raises(ValueError, match="looks"):
        compare_sequentially(rounds_from([1.0], [1.0]), looks=())
    with pytest.raises(ValueError, match="one sample per round"):
        rounds_from([1.0, 1.0], [1.0])


def test_plan_rounds_serves_inconclusive_cases_first() -> None:
    progress = {
        "done": CaseProgress("no_change", 3),
        "found": CaseProgress("regression", 3),
        "late": CaseProgress("inconclusive", 5),
        "early": CaseProgress("inconclusive", 3),
        "new": CaseProgress(None, 0),
        "maxed": CaseProgress("inconclusive", 7),
        "confirmed": CaseProgress("regression", 3, confirming=True),
        "confirming": CaseProgress("inconclusive", 3, confirming=True),
    }
    assert list(plan_rounds(progress, 100)) == ["new", "early", "late", "confirming", "found"]
    assert plan_rounds(progress, 100)["found"] == 3
    assert plan_rounds(progress, 7) == {"new": 3, "early": 2, "late": 2}
    # A grant that does not fit is skipped; a cheaper one further down takes the rest.
    assert plan_rounds(progress, 4) == {"new": 3}
    assert plan_rounds({"a": CaseProgress(None, 0), "b": CaseProgress("inconclusive", 5)}, 2) == {
        "b": 2
    }
    assert plan_rounds(progress, 0) == {}


def test_plan_rounds_validates() -> None:
    with pytest.raises(ValueError, match="budget"):
        plan_rounds({}, -1)
    with pytest.raises(ValueError, match="looks"):
        plan_rounds({}, 3, looks=(5, 3))


@pytest.mark.parametrize("module", [stats, sequential])
def test_docstring_examples(module: object) -> None:
    result = doctest.testmod(module)  # type: ignore[arg-type]
    assert result.attempted > 0
    assert result.failed == 0


# --- seeded simulations: error rates that are known exactly ------------------------------------


def _regression_rate(n: int, shift: float, trials: int, seed: int) -> float:
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(trials):
        base = rng.lognormal(0.0, 0.02, n)
        head = rng.lognormal(shift, 0.02, n)
        hits += decide_latency(list(base), list(head), delta=1e-6).verdict == "regression"
    return hits / trials


@pytest.mark.parametrize(("n", "expected"), [(3, 1 / 20), (5, 12 / 252)])
def test_false_alarm_rate_is_the_exact_size_of_the_test(n: int, expected: float) -> None:
    # No change, a negligible margin: the rule flags exactly when p <= 0.05, which under the
    # null happens with probability P(U <= k - 1) (1/20 at 3 rounds, 12/252 at 5).
    trials = 3000
    assert within(_regression_rate(n, 0.0, trials, seed=n), expected, trials)


def test_power_at_three_rounds_is_the_chance_of_full_separation() -> None:
    # Log-normal noise, true shift 1.5 sigma: at 3 rounds a regression is a full separation,
    # P(min head > max base) = integral of d/dx[Phi(x)^3] * (1 - Phi(x - 1.5))^3.
    def integrand(x: float) -> float:
        phi, cdf = scipy.stats.norm.pdf(x), scipy.stats.norm.cdf(x)
        return float(3 * phi * cdf**2 * scipy.stats.norm.sf(x - 1.5) ** 3)

    expected = scipy.integrate.quad(integrand, -10, 10)[0]
    trials = 3000
    assert 0.2 < expected < 0.6
    assert within(_regression_rate(3, 1.5 * 0.02, trials, seed=99), expected, trials)


def test_sequential_rule_false_alarms_and_power() -> None:
    # The full rule on clean log-normal noise (sigma 2 %): a confirmed false regression needs
    # two independent chance extremes beyond the 5 % margin, so essentially none occur; a +10 %
    # regression is found and confirmed almost always.
    rng = np.random.default_rng(2024)

    def feed(effect: float) -> sequential.NextRound:
        return lambda: (float(rng.lognormal(0, 0.02)), float(rng.lognormal(math.log(effect), 0.02)))

    trials = 300
    false = sum(compare_sequentially(feed(1.0)).verdict == "regression" for _ in range(trials))
    caught = sum(compare_sequentially(feed(1.10)).verdict == "regression" for _ in range(trials))
    assert false / trials <= 0.01
    assert caught / trials >= 0.95


def test_permutations_of_rounds_do_not_matter() -> None:
    # The rule judges the samples of a look as sets: the order of rounds within it is free.
    base, head = [1.0, 1.02, 0.99], [1.08, 1.1, 1.09]
    verdicts = {decide_latency(list(b), list(head)).verdict for b in permutations(base)}
    assert verdicts == {"regression"}
