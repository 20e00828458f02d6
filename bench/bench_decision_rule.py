"""Benchmark: false alarms, power and rounds of the latency rule, measured on the product's code.

Each simulated comparison is one case run through :class:`harness.compare.session.Session`,
the code ``harness compare`` runs: :func:`~harness.compare.sequential.plan_rounds` buys rounds,
:func:`~harness.compare.latency.decide_stages` judges every stage (Holm over the case's judged
stages and ``total``, alpha spent over looks at 3, 5, 7 rounds), a detected regression gets a
fresh batch and :func:`~harness.compare.latency.confirm` re-judges it. Only the worker is
simulated: a stand-in for :class:`~harness.execution.paired.PairedRunner` yields
:class:`~harness.model.Attempt` records whose stage times are

- log-normal around 0.1 s per stage with the given sigma (independently per stage and run),
- with a slow linear drift of the runner (each comparison draws a slope in +-0.5 % per run),
- and hiccups: 5 % of runs have one stage (chosen at random) 30-100 % slower;

``total`` is the sum of the stages plus 10 ms. Rounds alternate A B B A as on a real runner.
The runner is uncalibrated (margin = delta = 5 %), as every runner is until ``--aa`` has run
on it; ``--calibrated`` first calibrates it with a 7-round A/A run of the same simulation
through :func:`harness.compare.noise.calibrate`.

    python bench/bench_decision_rule.py            # 1000 no-change / 400 power comparisons
    python bench/bench_decision_rule.py --quick    # 300 / 150, a third of the time
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

import numpy as np

# Runnable from a checkout without installing the package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.cases import PlanItem
from harness.compare.latency import LatencySettings, case_verdict
from harness.compare.noise import calibrate
from harness.compare.session import Session
from harness.execution.paired import PairedRunner
from harness.model import Attempt, Case, CaseResult, Side

STAGE_S = 0.1
DRIFT = 0.005
HICCUP = 0.05


@dataclass
class World:
    """The simulated code and runner of one comparison."""

    rng: np.random.Generator
    stages: int
    sigma: float
    slope: float
    slow_stage: int = -1  # which stage head slowed (-1: none)
    effect: float = 0.0
    t: int = 0

    def run(self, head: bool) -> tuple[dict[str, float], float]:
        x = self.rng.normal(self.slope * self.t, self.sigma, self.stages)
        if head and self.slow_stage >= 0:
            x[self.slow_stage] += math.log1p(self.effect)
        if self.rng.random() < HICCUP:
            x[self.rng.integers(self.stages)] += math.log1p(self.rng.uniform(0.3, 1.0))
        self.t += 1
        secs = STAGE_S * np.exp(x)
        return {f"step{i:02d}": float(s) for i, s in enumerate(secs)}, float(secs.sum()) + 0.01


class SimulatedRunner:
    """A stand-in for :class:`PairedRunner` (simulated: no worker process runs): what
    :class:`Session` calls, answering with Attempt records drawn from a :class:`World`."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.next_round = 0
        self.stop_requested = False
        self.attempts: dict[tuple[Side, str], list[Attempt]] = {}

    def side_attempts(self, side: Side, item: PlanItem) -> list[Attempt]:
        return self.attempts.setdefault((side, item.name), [])

    def run_rounds(self, items: Sequence[PlanItem], rounds: int) -> int:
        for _ in range(rounds):
            r = self.next_round
            order: tuple[Side, Side] = ("base", "head") if r % 2 == 0 else ("head", "base")
            for item in items:
                for side in order:
                    stages, total = self.world.run(side == "head")
                    got = self.side_attempts(side, item)
                    got.append(
                        Attempt(
                            item.case.id,
                            item.platform,
                            len(got),
                            "passed",
                            0,
                            side=side,
                            round=r,
                            stages=stages,
                            duration_s=total,
                        )
                    )
            self.next_round += 1
        return rounds

    def result(self, side: Side, item: PlanItem) -> CaseResult:
        return CaseResult(
            item.case.id,
            item.case.kind,
            item.platform,
            "passed",
            attempts=tuple(self.side_attempts(side, item)),
        )


ITEM = PlanItem(Case("sim/case", "pipeline", "bench"), "cpu")


@dataclass
class Outcome:
    verdict: str
    detect_rounds: int
    confirm_rounds: int


def compare_once(world: World, settings: LatencySettings) -> Outcome:
    runner = SimulatedRunner(world)
    session = Session(cast(PairedRunner, runner), [ITEM], settings, budget_s=None)
    session.run()
    state = session.states[ITEM.name]
    return Outcome(case_verdict(state.stages()), len(state.detect), len(state.fresh))


def calibrated(world: World, settings: LatencySettings, rounds: int = 7) -> LatencySettings:
    """The settings with noise calibrated by an A/A run of ``world`` (head = base)."""
    aa = SimulatedRunner(replace(world, slow_stage=-1))
    aa.run_rounds([ITEM], rounds)
    figures = calibrate(
        {ITEM.name: (aa.side_attempts("base", ITEM), aa.side_attempts("head", ITEM))},
        contention_free={ITEM.name},
    )
    noise = {c: {s: v["noise"] for s, v in st.items()} for c, st in figures.items()}
    return replace(settings, noise=noise)


def cell(
    args: argparse.Namespace, stages: int, sigma: float, effect: float, trials: int
) -> dict[str, Any]:
    rng = np.random.default_rng([args.seed, stages, round(sigma * 1000), round(effect * 1000)])
    base_settings = LatencySettings()
    counts: dict[str, int] = {}
    rounds = 0
    for _ in range(trials):
        world = World(
            rng,
            stages,
            sigma,
            float(rng.uniform(-DRIFT, DRIFT)),
            slow_stage=int(rng.integers(stages)) if effect else -1,
            effect=effect,
        )
        settings = calibrated(world, base_settings) if args.calibrated else base_settings
        out = compare_once(world, settings)
        counts[out.verdict] = counts.get(out.verdict, 0) + 1
        rounds += out.detect_rounds + out.confirm_rounds
    return {"counts": counts, "rounds": rounds / trials, "n": trials}


def _pct(k: int, n: int) -> str:
    return f"{k / n:6.1%}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=1000, help="per no-change cell (1000)")
    parser.add_argument("--power-trials", type=int, default=400, help="per power cell (400)")
    parser.add_argument("--quick", action="store_true", help="300 / 150 comparisons per cell")
    parser.add_argument("--calibrated", action="store_true", help="calibrate each runner (A/A)")
    parser.add_argument("--seed", type=int, default=18)
    args = parser.parse_args(argv)
    if args.quick:
        args.trials, args.power_trials = 300, 150
    t0 = time.perf_counter()
    s = LatencySettings()
    how = "calibrated (A/A, 7 rounds)" if args.calibrated else "uncalibrated"
    print(
        f"Session + plan_rounds + decide_stages + confirm over simulated attempts; looks "
        f"{'/'.join(map(str, s.looks))}, alpha {s.alpha} (each batch {s.batch_alpha:.3f}), "
        f"delta {s.delta:.0%}, {how}"
        f"; hiccups {HICCUP:.0%} of runs; drift +-{DRIFT:.1%}/run"
    )
    print()
    print(f"no change ({args.trials} comparisons per cell); stages judged + total")
    print(
        f"{'stages':>6} {'noise':>5} | {'confirmed':>9} {'suspect':>7} {'no_chg':>6} "
        f"{'inconcl':>7} {'impr':>6} | {'rounds':>6}"
    )
    for stages in (1, 5, 14):
        for sigma in (0.03, 0.05, 0.08):
            c = cell(args, stages, sigma, 0.0, args.trials)
            k, n = c["counts"], c["n"]
            print(
                f"{stages:>6} {sigma:>5.0%} | {_pct(k.get('regression', 0), n):>9} "
                f"{_pct(k.get('suspect', 0), n):>7} {_pct(k.get('no_change', 0), n):>6} "
                f"{_pct(k.get('inconclusive', 0), n):>7} {_pct(k.get('improvement', 0), n):>6} | "
                f"{c['rounds']:>6.2f}",
                flush=True,
            )
    print()
    print(f"power: one stage of 14 slower ({args.power_trials} comparisons per cell)")
    print(
        f"{'effect':>6} {'noise':>5} | {'confirmed':>9} {'suspect':>7} {'inconcl':>7} | "
        f"{'rounds':>6}"
    )
    for effect in (0.10, 0.20):
        for sigma in (0.03, 0.05, 0.08):
            c = cell(args, 14, sigma, effect, args.power_trials)
            k, n = c["counts"], c["n"]
            print(
                f"{effect:>+6.0%} {sigma:>5.0%} | {_pct(k.get('regression', 0), n):>9} "
                f"{_pct(k.get('suspect', 0), n):>7} {_pct(k.get('inconclusive', 0), n):>7} | "
                f"{c['rounds']:>6.2f}",
                flush=True,
            )
    print()
    print(
        "confirmed: regression found by the detection batch and again by the fresh batch "
        "(exit 1); suspect: found,\nnot confirmed; rounds: mean rounds used per comparison "
        "(detection + confirmation batches, each side)."
    )
    print(f"{time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
