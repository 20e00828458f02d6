"""Where a comparison's latency scatter comes from: the runs of one worker, or the workers.

Reads the attempts of finished `harness compare` folders (``attempts.jsonl``, as the run wrote
them) and, per side, splits one stage's log-latency scatter (contention-free: wall time less
run-queue delay, as CPU comparisons judge it) into

- **within**: between the measured runs of one round (one worker process, ``--runs-per-round``
  of them), the pooled standard deviation;
- **process**: between rounds' means beyond what ``within`` explains (each round is a fresh
  pair of workers), ``sqrt(var(round means) - within^2 / runs)``;
- **one run**: what one run per round would scatter by, ``sqrt(within^2 + process^2)``;
- **median**: the observed spread of the rounds' medians, the samples the rule judges.

``median`` below ``one run`` is what several runs per round buy. Needs comparisons with at
least two runs per round (the default with fresh workers is three).

    python bench/round_spread.py /tmp/verdicts-*/runs/*-0 --stage DenoisingStage
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

# Runnable from a checkout without installing the package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.model import Attempt, judged_seconds, passing_finals


def spread(folder: Path, stage: str, side: str) -> dict[str, float] | None:
    attempts = [
        Attempt.from_json(json.loads(line))
        for line in (folder / "attempts.jsonl").read_text().splitlines()
    ]
    per_round: dict[int, list[float]] = {}
    # the product's own definitions: which runs count, and the seconds a comparison judges
    for a in passing_finals([a for a in attempts if a.side == side]):
        own = judged_seconds(a, contention_free=True).get(stage)
        if own:
            per_round.setdefault(a.round, []).append(math.log(own))
    rounds = [v for v in per_round.values() if len(v) >= 2]
    if len(rounds) < 3:
        return None
    runs = statistics.mean(len(v) for v in rounds)
    within2 = statistics.mean(statistics.variance(v) for v in rounds)
    means = [statistics.mean(v) for v in rounds]
    process2 = max(statistics.variance(means) - within2 / runs, 0.0)
    return {
        "rounds": len(rounds),
        "runs": runs,
        "within": math.sqrt(within2),
        "process": math.sqrt(process2),
        "one_run": math.sqrt(within2 + process2),
        "median": statistics.stdev(statistics.median(v) for v in rounds),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="+", type=Path, help="comparison folders")
    ap.add_argument("--stage", default="DenoisingStage")
    args = ap.parse_args()
    print(f"{args.stage}: log-latency sd (contention-free)")
    print(f"{'comparison':24} {'side':4} {'rounds':>6} {'within':>7} {'process':>7} "
          f"{'one run':>7} {'median':>7} {'cut':>5}")  # fmt: skip
    cuts = []
    for folder in args.folders:
        for side in ("base", "head"):
            s = spread(folder, args.stage, side)
            if s is None:
                continue
            cut = 1 - s["median"] / s["one_run"] if s["one_run"] else 0.0
            cuts.append(cut)
            print(
                f"{folder.name:24} {side:4} {s['rounds']:>6} {s['within']:>7.3f} "
                f"{s['process']:>7.3f} {s['one_run']:>7.3f} {s['median']:>7.3f} {cut:>5.0%}"
            )
    if cuts:
        print(
            f"\nthe rounds' medians scatter {statistics.median(cuts):.0%} less than one run a "
            f"round would (median over {len(cuts)} series; range {min(cuts):.0%} to "
            f"{max(cuts):.0%})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
