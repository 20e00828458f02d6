"""Change-point libraries on planted histories: which one ``harness history`` uses, and why.

Each history is 200 runs of one stage's latency with log-normal noise (3, 5 or 8 %), steps of
+5 %, +10 % and +20 % at known runs (60, 110, 160) and one flaky period (runs 15-45: one run in
five up to 30 % slower, as a retried, contended case reads). A planted step is *found* when a
change point lies within 3 runs of it; every other change point is *false* (counted per 1,000
runs). Libraries:

- ``apache-otava`` through the product's own code (:func:`harness.history.detect.change_points`,
  log seconds, p <= 0.001, window 100);
- ``signal-processing-algorithms`` (MongoDB's ``e_divisive``, permutation test, p <= 0.01 and
  100 permutations, on the same log seconds).

Usage::

    python bench/bench_history_detect.py            # 20 histories per noise level
    python bench/bench_history_detect.py --histories 50
"""

from __future__ import annotations

import argparse
import math
import random
import time
from collections.abc import Callable

from harness.history.detect import change_points
from harness.history.series import Group, Point, RunInfo, Series, SeriesKey

RUNS = 200
STEPS = {60: 1.05, 110: 1.10, 160: 1.20}
FLAKY = (15, 45)
NOISES = (0.03, 0.05, 0.08)
TOLERANCE = 3


def history(noise: float, seed: int) -> list[float]:
    rng = random.Random(seed)
    out = []
    for i in range(RUNS):
        v = 0.1 * math.prod(f for at, f in STEPS.items() if i >= at)
        v *= math.exp(rng.gauss(0.0, noise))
        if FLAKY[0] <= i < FLAKY[1] and rng.random() < 0.2:
            v *= 1.0 + 0.3 * rng.random()
        out.append(v)
    return out


def otava(values: list[float]) -> list[int]:
    runs = [RunInfo(i, f"r{i}", f"c{i}", f"t{i:04d}", "", "", 1) for i in range(len(values))]
    key = SeriesKey(Group("cpu", "Linux-x86_64"), "pipeline/x[cpu]", "stage:Denoise")
    series = Series(key, [Point(r, v) for r, v in zip(runs, values, strict=True)])
    return [cp.index for cp in change_points(series)]


def spa(values: list[float]) -> list[int]:
    from signal_processing_algorithms.energy_statistics import energy_statistics

    logs = [math.log(v) for v in values]
    return sorted(energy_statistics.e_divisive(logs, pvalue=0.01, permutations=100))


LIBRARIES: dict[str, Callable[[list[float]], list[int]]] = {
    "apache-otava": otava,
    "signal-processing-algorithms": spa,
}


def score(found: list[int]) -> tuple[dict[int, bool], int]:
    hit = {at: False for at in STEPS}
    false = 0
    for i in found:
        near = [at for at in STEPS if abs(i - at) <= TOLERANCE]
        if near:
            hit[near[0]] = True
        else:
            false += 1
    return hit, false


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--histories", type=int, default=20, help="histories per noise level")
    args = p.parse_args(argv)
    n = args.histories
    print(
        f"{n} histories x {RUNS} runs per noise level; steps +5/+10/+20 % at runs "
        f"{'/'.join(map(str, STEPS))}; flaky period runs {FLAKY[0]}-{FLAKY[1] - 1}"
    )
    print(
        f"{'library':30} {'noise':>5}  {'+5 %':>6} {'+10 %':>6} {'+20 %':>6}  "
        f"{'false/1000 runs':>15}  {'ms/series':>9}"
    )
    for name, detect in LIBRARIES.items():
        detect(history(0.05, 999))  # imports (scipy.stats for Otava) outside the timing
        for noise in NOISES:
            found = dict.fromkeys(STEPS, 0)
            false = 0
            spent = 0.0
            for seed in range(n):
                values = history(noise, seed)
                t0 = time.perf_counter()
                cps = detect(values)
                spent += time.perf_counter() - t0
                hit, f = score(cps)
                false += f
                for at, ok in hit.items():
                    found[at] += ok
            per_k = false / (n * RUNS) * 1000
            cells = " ".join(f"{found[at]:>3}/{n:<2}" for at in STEPS)
            print(f"{name:30} {noise:>5.0%}  {cells}  {per_k:>15.2f}  {spent / n * 1000:>9.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
