"""compare.sequential: the round scheduler; seeded simulations of the single-stage test.
(The whole rule through the session: test_latency_rule.py and bench/bench_decision_rule.py.)"""

from __future__ import annotations

import doctest
from itertools import permutations

import numpy as np
import pytest
import scipy.integrate
import scipy.stats
from sampling import within

from harness.compare import sequential, stats
from harness.compare.sequential import CaseProgress, plan_rounds
from harness.compare.stats import (
    decide_latency,
)


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


def test_permutations_of_rounds_do_not_matter() -> None:
    # The rule judges the samples of a look as sets: the order of rounds within it is free.
    base, head = [1.0, 1.02, 0.99], [1.08, 1.1, 1.09]
    verdicts = {decide_latency(list(b), list(head)).verdict for b in permutations(base)}
    assert verdicts == {"regression"}


def test_several_runs_per_round_alternate_inside_the_round() -> None:
    """Three runs per side in a round go A B B A A B (B A A B B A in the next round), so a
    side's runs of one round sit beside the other side's; run j of round r is repeat 3r + j."""
    from harness.cases import PlanItem
    from harness.execution.schedule import Interleaved
    from harness.model import Case

    item = PlanItem(Case("c", "pipeline", "t"), "cpu")
    units = list(Interleaved([item], rounds=2, warmup=False, runs_per_round=3))
    assert "".join("A" if u.side == "base" else "B" for u in units) == "ABBAAB" + "BAABBA"
    assert [(u.round, u.repeat) for u in units if u.side == "head"] == [
        (0, 0),
        (0, 1),
        (0, 2),
        (1, 3),
        (1, 4),
        (1, 5),
    ]
    with pytest.raises(ValueError, match="runs_per_round"):
        Interleaved([item], rounds=1, runs_per_round=0)
