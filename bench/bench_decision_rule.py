"""Benchmark: false alarms, power and rounds of the latency decision rule, by simulation.

Simulates one stage's latency on one runner: log-normal noise (sigma 2 % and 8 %), one-sided
hiccups (each run has a 5 % chance of being 30-100 % slower), and a slow linear drift of the
runner (each trial draws a slope uniformly in +-DRIFT per run, e.g. warming up or throttling).
Each trial first calibrates the noise from an A/A run (7 rounds, same revision both sides),
then runs the rule of DESIGN.md "Deciding a latency difference" through
``harness.compare.sequential.compare_sequentially``: rounds in A B B A order, looks at 3, 5
and 7 rounds, margin = max(5 %, 2 x noise), alpha = 0.05, and a fresh batch to confirm a
regression (``suspect`` when it does not). True effects: none, +5 %, +10 %, +20 %.

For contrast, two baselines on the same simulated runner:

- a fixed 5 % threshold on the mean: 5 interleaved rounds, flag if mean(head) / mean(base) >
  1.05;
- blocked order: 7 runs of base, then 7 of head, judged once by the same decision (same
  calibrated margin) and by the one-sided test alone (p <= 0.05, no margin), each next to the
  same judgement of 7 interleaved rounds.

    python bench/bench_decision_rule.py                 # 1500 trials per cell, about a minute
    python bench/bench_decision_rule.py --trials 500 --hiccup 0.025 --looks 3,5,7,9
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# Runnable from a checkout without installing the package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.compare.sequential import compare_sequentially
from harness.compare.stats import calibrate_noise, decide_latency

EFFECTS = (0.0, 0.05, 0.10, 0.20)
SIGMAS = (0.02, 0.08)


@dataclass
class Runner:
    """One simulated runner session: a clock of runs, drift along it, noise and hiccups."""

    rng: np.random.Generator
    sigma: float
    slope: float  # drift of log latency per run
    hiccup: float  # chance that a run is a hiccup
    t: int = 0
    r: int = 0

    def run(self, log_effect: float) -> float:
        x = log_effect + self.slope * self.t + self.rng.normal(0.0, self.sigma)
        if self.rng.random() < self.hiccup:
            x += math.log1p(self.rng.uniform(0.3, 1.0))
        self.t += 1
        return math.exp(x)

    def round(self, log_a: float, log_b: float) -> tuple[float, float]:
        """One round in A B B A order: A first in even rounds, B first in odd ones."""
        if self.r % 2 == 0:
            a = self.run(log_a)
            b = self.run(log_b)
        else:
            b = self.run(log_b)
            a = self.run(log_a)
        self.r += 1
        return a, b


def new_runner(rng: np.random.Generator, sigma: float, drift: float, hiccup: float) -> Runner:
    return Runner(rng, sigma, float(rng.uniform(-drift, drift)), hiccup)


def calibrate(runner: Runner, n_rounds: int) -> float:
    rounds = [runner.round(0.0, 0.0) for _ in range(n_rounds)]
    return calibrate_noise([a for a, _ in rounds], [b for _, b in rounds]).noise


@dataclass
class Cell:
    verdicts: dict[str, int]
    rounds: int = 0
    total_rounds: int = 0
    margin: float = 0.0
    mean_flags: int = 0
    blocked_rule: int = 0
    interleaved_rule: int = 0
    blocked_test: int = 0
    interleaved_test: int = 0


def simulate(effect: float, sigma: float, trials: int, args: argparse.Namespace) -> Cell:
    rng = np.random.default_rng([args.seed, round(effect * 1000), round(sigma * 1000)])
    log_head = math.log1p(effect)
    cell = Cell(
        {v: 0 for v in ("regression", "suspect", "inconclusive", "no_change", "improvement")}
    )
    for _ in range(trials):
        # The rule, with its own A/A calibration on the same runner session.
        runner = new_runner(rng, sigma, args.drift, args.hiccup)
        noise = calibrate(runner, args.calibration_rounds)
        feed = functools.partial(runner.round, 0.0, log_head)
        result = compare_sequentially(feed, looks=args.looks, noise=noise)
        cell.verdicts[result.verdict] += 1
        cell.rounds += result.rounds
        cell.total_rounds += result.total_rounds
        cell.margin += max(0.05, 2 * noise)

        # Baseline 1: a fixed 5 % threshold on the mean of 5 interleaved rounds.
        runner = new_runner(rng, sigma, args.drift, args.hiccup)
        pairs = [runner.round(0.0, log_head) for _ in range(5)]
        ratio = sum(h for _, h in pairs) / sum(b for b, _ in pairs)
        cell.mean_flags += ratio > 1.05

        # Baseline 2: blocked order (7 base runs, then 7 head runs) vs 7 interleaved rounds,
        # each judged once by the same decision with its calibrated margin, and by the test.
        for blocked in (True, False):
            runner = new_runner(rng, sigma, args.drift, args.hiccup)
            noise = calibrate(runner, args.calibration_rounds)
            if blocked:
                base = [runner.run(0.0) for _ in range(7)]
                head = [runner.run(log_head) for _ in range(7)]
            else:
                pairs = [runner.round(0.0, log_head) for _ in range(7)]
                base, head = [b for b, _ in pairs], [h for _, h in pairs]
            d = decide_latency(base, head, noise=noise)
            # The test alone, with the rule's tolerance for p == alpha.
            rule, test = d.verdict == "regression", d.p_regression <= 0.05 * (1 + 1e-9)
            if blocked:
                cell.blocked_rule += rule
                cell.blocked_test += test
            else:
                cell.interleaved_rule += rule
                cell.interleaved_test += test
    return cell


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=1500, help="trials per cell (1500)")
    parser.add_argument("--seed", type=int, default=8)
    parser.add_argument("--drift", type=float, default=0.005, help="max |drift| per run (0.005)")
    parser.add_argument("--hiccup", type=float, default=0.05, help="chance of a hiccup (0.05)")
    parser.add_argument("--calibration-rounds", type=int, default=7, help="A/A rounds (7)")
    parser.add_argument(
        "--looks", type=lambda v: tuple(int(x) for x in v.split(",")), default=(3, 5, 7)
    )
    args = parser.parse_args(argv)

    t0 = time.perf_counter()
    print(
        f"{args.trials} trials per cell, seed {args.seed}; hiccups {args.hiccup:.1%} of runs "
        f"(+30..100 %); drift slope ~ U(+-{args.drift:.2%}) per run; A/A calibration "
        f"{args.calibration_rounds} rounds; looks {args.looks}; margin = max(5 %, 2 x noise), "
        "alpha 0.05"
    )
    print()
    head = (
        f"{'effect':>6} {'sigma':>5} | {'flagged':>7} {'suspect':>7} {'inconcl':>7} "
        f"{'no_chg':>6} {'impr':>4} {'rounds':>6} {'+confirm':>8} {'margin':>6} | {'mean>5%':>7} | "
        f"{'blocked':>7} {'interl.':>7} | {'blocked':>7} {'interl.':>7}"
    )
    looks = "/".join(map(str, args.looks))
    groups = (
        f"{'':13}| {f'sequential rule: {looks} looks + confirmation':<60}| {'N=5':<8}| "
        f"{'N=7, rule':<16}| N=7, p<=0.05 only"
    )
    print(groups)
    print(head)
    print("-" * len(head))
    for sigma in SIGMAS:
        for effect in EFFECTS:
            n = args.trials
            c = simulate(effect, sigma, n, args)
            v = c.verdicts
            print(
                f"{effect:>+6.0%} {sigma:>5.0%} | {v['regression'] / n:>7.1%} "
                f"{v['suspect'] / n:>7.1%} {v['inconclusive'] / n:>7.1%} "
                f"{v['no_change'] / n:>6.1%} {v['improvement'] / n:>4.0%} "
                f"{c.rounds / n:>6.2f} {c.total_rounds / n:>8.2f} "
                f"{c.margin / n:>6.1%} | {c.mean_flags / n:>7.1%} | "
                f"{c.blocked_rule / n:>7.1%} {c.interleaved_rule / n:>7.1%} | "
                f"{c.blocked_test / n:>7.1%} {c.interleaved_test / n:>7.1%}",
                flush=True,
            )
    print()
    print(
        "flagged: confirmed regressions; suspect: found, not confirmed; rounds: mean rounds of"
        " the detection batch;\n+confirm: including the confirmation batch; margin: mean"
        " max(5 %, 2 x noise); mean>5%: mean(head) / mean(base) > 1.05;\nblocked: 7 base runs"
        " then 7 head runs; interl.: 7 A B B A rounds; rule: verdict regression; p<=0.05 only:"
        " the one-sided test alone."
    )
    print(f"{time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
