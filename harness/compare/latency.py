"""Per-stage latency of one case, base vs head, from the attempts of chosen rounds.

Samples are the stage seconds of measured, passing attempts (the final attempt of each round
and side; retries replace their predecessor), ``total`` being the attempt's whole duration.
A stage whose median is below ``min_stage_s`` on both sides is reported but not judged: a few
microseconds of work are timer and scheduler noise, and judging them would only multiply
false alarms.
"""

from __future__ import annotations

import statistics
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

from harness.compare.stats import decide_latency
from harness.model import Attempt, StageLatency

# A case's latency verdict from its judged stages, worst first.
_ORDER = ("regression", "suspect", "inconclusive", "improvement", "no_change")


@dataclass(frozen=True)
class LatencySettings:
    """The decision rule's knobs (DESIGN: "Deciding a latency difference")."""

    delta: float = 0.05
    alpha: float = 0.05
    looks: tuple[int, ...] = (3, 5, 7)
    confirm: bool = True
    min_stage_s: float = 0.010
    # case name -> stage -> calibrated base-vs-base noise (runners/noise/<runner>.json)
    noise: Mapping[str, Mapping[str, float]] = field(default_factory=dict)


def round_samples(
    attempts: Sequence[Attempt], rounds: Collection[int] | None = None
) -> dict[str, list[float]]:
    """Seconds per stage over the final measured attempt of each round that passed."""
    finals: dict[tuple[int, int], Attempt] = {}
    for a in attempts:
        if a.warmup or a.status == "budget_declined":
            continue
        if rounds is not None and a.round not in rounds:
            continue
        finals[(a.round, a.repeat)] = a
    out: dict[str, list[float]] = {}
    for _key, a in sorted(finals.items()):
        if a.status != "passed":
            continue
        for stage, secs in a.stages.items():
            if secs > 0:
                out.setdefault(stage, []).append(float(secs))
        if a.duration_s > 0:
            out.setdefault("total", []).append(float(a.duration_s))
    return out


def decide_stages(
    base: Sequence[Attempt],
    head: Sequence[Attempt],
    settings: LatencySettings,
    *,
    case: str,
    rounds: Collection[int] | None = None,
) -> list[StageLatency]:
    """One :class:`StageLatency` per stage present on both sides, in base's stage order."""
    b, h = round_samples(base, rounds), round_samples(head, rounds)
    noise = settings.noise.get(case, {})
    out = []
    for stage, bs in b.items():
        hs = h.get(stage)
        if not hs:
            continue
        bmed, hmed = statistics.median(bs), statistics.median(hs)
        # judged when either side spends measurable time in it (a 2 ms stage slowed to 300 ms
        # is a finding; a 20 us stage jittering by 50 % is not)
        judged = max(bmed, hmed) >= settings.min_stage_s
        if len(bs) < 2 or len(hs) < 2:
            out.append(
                StageLatency(
                    stage,
                    "inconclusive",
                    n_base=len(bs),
                    n_head=len(hs),
                    base_median_s=bmed,
                    head_median_s=hmed,
                    judged=judged,
                    reason="fewer than 2 rounds on a side",
                )
            )
            continue
        d = decide_latency(
            bs, hs, delta=settings.delta, noise=noise.get(stage), alpha=settings.alpha
        )
        out.append(
            StageLatency(
                stage,
                d.verdict,
                ratio=d.ratio,
                ci_low=d.ci_low,
                ci_high=d.ci_high,
                p=d.p,
                n_base=d.n_base,
                n_head=d.n_head,
                margin=d.margin,
                noise=noise.get(stage),
                base_median_s=bmed,
                head_median_s=hmed,
                judged=judged,
                unstable=d.unstable and judged,
                unstable_reason=d.unstable_reason,
                reason=d.explain()
                if judged
                else (
                    f"not judged: medians {bmed * 1e3:.3g} / {hmed * 1e3:.3g} ms are below "
                    f"{settings.min_stage_s * 1e3:g} ms"
                ),
            )
        )
    return out


def case_verdict(stages: Sequence[StageLatency]) -> str:
    """The worst verdict of the judged stages; ``missing`` when none could be judged."""
    verdicts = [s.verdict for s in stages if s.judged]
    if not verdicts:
        return "missing"
    return min(verdicts, key=lambda v: _ORDER.index(v) if v in _ORDER else 0)


def confirm(
    detection: Sequence[StageLatency],
    confirmation: Sequence[StageLatency] | None,
    *,
    no_batch: str = "no rounds were left to confirm it",
) -> list[StageLatency]:
    """Each detected regression becomes ``suspect`` unless the fresh batch found it again.

    Without a ``confirmation`` batch every regression is ``suspect``, ``no_batch`` saying why.
    """
    again = {s.stage: s for s in confirmation or ()}
    out = []
    for s in detection:
        if s.verdict != "regression" or not s.judged:
            out.append(s)
            continue
        fresh = again.get(s.stage)
        if fresh is not None and fresh.verdict == "regression":
            out.append(replace(s, confirmation="regression"))
            continue
        why = no_batch if fresh is None else f"the fresh batch says {fresh.reason or fresh.verdict}"
        out.append(
            replace(
                s,
                verdict="suspect",
                confirmation=fresh.verdict if fresh is not None else None,
                reason=f"{s.reason}; not confirmed: {why}",
            )
        )
    return out
