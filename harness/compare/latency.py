"""Per-stage latency of one case, base vs head, from the attempts of chosen rounds.

Samples are :func:`harness.model.counting.judged_seconds` of each run's final attempt that
passed (:func:`~harness.model.counting.passing_finals`), ``total`` being the attempt's whole
duration; in a live comparison one sample per round and side, the median of the round's
runs (:func:`round_samples`). On CPU platforms they are contention-free (wall time less
run-queue delay: other processes' load is not the code's time, while a sleep, a lock or I/O
head adds still is); on device platforms they are what the platform measures. A stage whose
median is below ``min_stage_s`` on both sides is reported but not judged: a few microseconds
of work are timer and scheduler noise.

The rule (DESIGN.md "Deciding a latency difference"), per batch of rounds:

- **A family held together.** A case's judged stages, ``total`` included, are tested as one
  family with Holm's step-down procedure (:func:`~harness.compare.stats.holm`), so the chance
  that any stage of a case that did not regress is called a regression is at most the batch's
  level. Holm rather than a hierarchy from ``total`` down: one stage of 14 slowing by 20 %
  moves ``total`` by about 1.4 %, under any margin, so a hierarchy gated on ``total`` would
  never reach the stage that regressed; Holm tests every stage and only costs the smallest p
  a division by the family size.
- **Spent over the looks.** A batch looks at 3, 5 and 7 rounds; each look gets its share of
  the batch's level (:func:`~harness.compare.stats.family_level`).
- **Two batches.** A case is a confirmed regression only when its detection batch and a fresh
  confirmation batch each find one (any stage of it: :func:`confirm`; the fresh batch
  re-judges every stage, those the detection batch flagged carrying half its level). The batches are
  independent, so a case with no regression is confirmed with probability at most the product
  of their levels; each batch therefore runs at ``sqrt(alpha)`` (0.224 for ``alpha = 0.05``),
  and a lone batch (``--no-confirm``, saved runs) at ``alpha``
  (:attr:`LatencySettings.batch_alpha`).
- Improvements block nothing and are not confirmed, so their family is held at ``alpha``.
- no_change needs every judged stage's two-sided ``1 - 2 * alpha`` interval inside the margin.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

from harness.compare.stats import (
    MAX_MARGIN,
    LatencyDecision,
    classify,
    decide_latency,
    family_level,
    holm,
    one_sided_bounds,
)
from harness.model import Attempt, StageLatency, judged_seconds, passing_finals

# A case's latency verdict from its judged stages, worst first.
_ORDER = ("regression", "suspect", "inconclusive", "improvement", "no_change")

UNCALIBRATED = "uncalibrated runner"


@dataclass(frozen=True)
class LatencySettings:
    """The decision rule's knobs (DESIGN: "Deciding a latency difference").

    ``noise`` is case name -> stage -> calibrated base-vs-base noise (runners/noise/<runner>.json);
    a stage without a figure is judged with ``margin = delta`` and its reason says
    "uncalibrated runner". ``calibration_note`` says why the runner's calibration is missing,
    stale or from another environment; it is added to every verdict's reason.
    """

    delta: float = 0.05
    alpha: float = 0.05
    looks: tuple[int, ...] = (3, 5, 7)
    confirm: bool = True
    min_stage_s: float = 0.010
    max_margin: float = MAX_MARGIN
    spending_rho: float = 3.0
    noise: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    calibration_note: str | None = None

    @property
    def batch_alpha(self) -> float:
        """The error rate one batch holds a case's stages at (see the module docstring)."""
        return math.sqrt(self.alpha) if self.confirm else self.alpha


def _look_index(looks: Sequence[int], rounds: int) -> int:
    """Which planned look ``rounds`` rounds reached (the first when it fell short of it)."""
    return max(0, sum(1 for n in looks if n <= rounds) - 1)


def round_samples(
    attempts: Sequence[Attempt], rounds: Collection[int] | None, *, contention_free: bool
) -> dict[int, dict[str, float]]:
    """Round -> stage -> the round's one sample: the median of the judged seconds
    (:func:`~harness.model.counting.judged_seconds`) of its runs that passed, on one side.

    A round with several runs per side (``runs_per_round``) gives one sample, not several:
    its runs share one worker process, so they are not independent of one another the way
    rounds in fresh processes are, and rounds stay the unit of N. A stage a run did not time
    is left out of that run's median."""
    per: dict[int, dict[str, list[float]]] = {}
    for a in passing_finals(attempts, rounds):
        stages = per.setdefault(a.round, {})
        for stage, secs in judged_seconds(a, contention_free=contention_free).items():
            if secs > 0:
                stages.setdefault(stage, []).append(secs)
    return {r: {s: statistics.median(v) for s, v in st.items()} for r, st in per.items()}


def _samples(
    attempts: Sequence[Attempt], rounds: Collection[int] | None, contention_free: bool
) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    if rounds is None:
        # saved runs: every measured run is a sample (a plain run has no rounds)
        for a in passing_finals(attempts, rounds):
            for stage, secs in judged_seconds(a, contention_free=contention_free).items():
                if secs > 0:
                    out.setdefault(stage, []).append(secs)
        return out
    per_round = round_samples(attempts, rounds, contention_free=contention_free)
    for r in sorted(per_round):
        for stage, secs in per_round[r].items():
            out.setdefault(stage, []).append(secs)
    return out


def _explain(
    verdict: str, d: LatencyDecision, tested: float | None, family: int, level: float, b: str
) -> str:
    text = (
        f"{verdict}: {d.ratio - 1:+.1%} [{d.ci_low - 1:+.1%}, {d.ci_high - 1:+.1%}] "
        f"({1 - 2 * d.alpha:.0%} interval), margin {d.margin:.1%}, n={d.n_base}/{d.n_head}, "
    )
    if verdict in ("regression", "improvement") and tested is not None:
        side = "above" if verdict == "regression" else "below"
        text += (
            f"one-sided {1 - tested:.2%} bound {b} wholly {side} the margin "
            f"(Holm over {family} stage(s) at {level:.3g})"
        )
    else:
        text += (
            f"p(beyond margin)={min(d.p_above_margin, d.p_below_margin):.3g}, "
            f"Holm over {family} stage(s) at {level:.3g}"
        )
    return f"{text}; unstable: {d.unstable_reason}" if d.unstable else text


def decide_stages(
    base: Sequence[Attempt],
    head: Sequence[Attempt],
    settings: LatencySettings,
    *,
    case: str,
    rounds: Collection[int] | None = None,
    contention_free: bool = False,
    flagged: Collection[str] = (),
) -> list[StageLatency]:
    """One :class:`StageLatency` per stage present on both sides, in base's stage order.

    ``rounds`` are the batch's rounds (None: every measured run, judged as one look);
    ``contention_free`` judges wall time less run-queue delay (CPU platforms). ``flagged``
    are the stages a detection batch found slower, when this is the batch confirming them:
    they share half the family's level in a weighted Holm (the others the other half, and
    each rejection passes its share on), so a confirmation re-judges every stage but looks
    hardest where the regression was seen.
    """
    b = _samples(base, rounds, contention_free)
    h = _samples(head, rounds, contention_free)
    noise = settings.noise.get(case, {})
    note = settings.calibration_note
    common = [(s, bs, h[s]) for s, bs in b.items() if h.get(s)]
    judged = {
        s: max(statistics.median(bs), statistics.median(hs)) >= settings.min_stage_s
        for s, bs, hs in common
    }
    family = [s for s, bs, hs in common if judged[s] and len(bs) >= 2 and len(hs) >= 2]

    def spent(alpha: float) -> float:
        if rounds is None:
            return alpha
        look = _look_index(settings.looks, len(rounds))
        return family_level(settings.looks, look, alpha, len(family), rho=settings.spending_rho)

    level = spent(settings.batch_alpha)
    decisions = {
        s: decide_latency(
            bs,
            hs,
            delta=settings.delta,
            noise=noise.get(s),
            alpha=settings.alpha,
            level=min(level, 0.499),
            cap=settings.max_margin,
        )
        for s, bs, hs in common
        if len(bs) >= 2 and len(hs) >= 2
    }
    first = [s for s in family if s in flagged]
    weights = {s: (len(family) - len(first)) / len(first) if s in flagged else 1.0 for s in family}
    if not first or len(first) == len(family):
        weights = {s: 1.0 for s in family}
    slower = holm({s: decisions[s].p_above_margin for s in family}, level, weights)
    # an improvement is never confirmed by a second batch: its family is held at alpha itself
    faster = holm({s: decisions[s].p_below_margin for s in family}, spent(settings.alpha))
    out = []
    for stage, bs, hs in common:
        bmed, hmed = statistics.median(bs), statistics.median(hs)
        # judged when either side spends measurable time in it (a 2 ms stage slowed to 300 ms
        # is a finding; a 20 us stage jittering by 50 % is not)
        calibration = (
            (f"; {note}" if note else "")
            if noise.get(stage) is not None
            else f"; {UNCALIBRATED}" + (f": {note}" if note else "")
        )
        d = decisions.get(stage)
        if d is None:
            out.append(
                StageLatency(
                    stage,
                    "inconclusive",
                    n_base=len(bs),
                    n_head=len(hs),
                    base_median_s=bmed,
                    head_median_s=hmed,
                    judged=judged[stage],
                    reason="fewer than 2 rounds on a side" + calibration,
                )
            )
            continue
        verdict = classify(regression=stage in slower, improvement=stage in faster, inside=d.inside)
        tested = slower.get(stage, faster.get(stage))
        bound = ""
        if tested is not None:
            lo, hi = one_sided_bounds(bs, hs, tested)
            bound = f"{(lo if verdict == 'regression' else hi) - 1:+.1%}"
        reason = (
            _explain(
                verdict,
                d,
                tested,
                len(family),
                spent(settings.alpha) if verdict == "improvement" else level,
                bound,
            )
            + calibration
            if judged[stage]
            else (
                f"not judged: medians {bmed * 1e3:.3g} / {hmed * 1e3:.3g} ms are below "
                f"{settings.min_stage_s * 1e3:g} ms"
            )
        )
        out.append(
            StageLatency(
                stage,
                verdict,
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
                judged=judged[stage],
                unstable=d.unstable and judged[stage],
                unstable_reason=d.unstable_reason,
                reason=reason,
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
    """The stages to report once a detected regression met (or missed) its fresh batch.

    The fresh batch re-judges every stage. When it finds a regression in any judged stage, the
    case's regression is confirmed: each stage it calls a regression is reported as one (with
    the fresh batch's numbers where the detection batch had not flagged that stage), and a
    stage only the detection batch flagged is ``suspect``. When it finds none, or there is no
    batch (``no_batch`` says why), every detected regression is ``suspect``. Without a
    detected regression, ``detection`` is returned as is.
    """
    if not any(s.verdict == "regression" and s.judged for s in detection):
        return list(detection)
    fresh = {s.stage: s for s in confirmation or ()}
    out = []
    for s in detection:
        f = fresh.pop(s.stage, None)
        if f is not None and f.judged and f.verdict == "regression":
            if s.verdict == "regression":
                out.append(replace(s, confirmation="regression"))
            else:
                out.append(
                    replace(
                        f,
                        confirmation="regression",
                        reason=f"{f.reason} (found by the confirmation batch; the detection "
                        f"batch said {s.verdict})",
                    )
                )
            continue
        if s.verdict != "regression" or not s.judged:
            out.append(s)
            continue
        if confirmation is None:
            why = no_batch
        elif f is None:
            why = "the fresh batch did not time this stage"
        else:
            why = f"the fresh batch says {f.reason or f.verdict}"
        out.append(
            replace(
                s,
                verdict="suspect",
                confirmation=f.verdict if f is not None else None,
                reason=f"{s.reason}; not confirmed: {why}",
            )
        )
    # a stage only the fresh batch timed, found slower there
    out += [
        replace(f, confirmation="regression")
        for f in fresh.values()
        if f.judged and f.verdict == "regression"
    ]
    return out
