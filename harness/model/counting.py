"""Which attempts count, and for what (DESIGN: "Which attempts count"). The one definition.

A *run* of a case is one measured (round, repeat) slot. Its *final* attempt, the last try of
that slot (a retry replaces its predecessor), gives the run's outcome and its latency and
quality samples. Every attempt that *ran* (warm-ups and replaced tries included) counts for
failure signatures and flakiness: a hang that a retry hid is still a hang. ``skipped`` and
``budget_declined`` never ran and never count as passed.

Aggregation, the failure matrix, quality, latency, noise calibration and first divergence
all read these helpers; none re-derives them.

Example::

    for run in runs(result.attempts):
        run.final.status, [t.status for t in run.tries]
    samples = [a.stages for a in passing_finals(result.attempts)]
    signatures = {failure_signature(a) for a in ran(result.attempts) if a.status in FAILING}
"""

from __future__ import annotations

import statistics
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from harness.model.vocab import FAILING

if TYPE_CHECKING:  # records imports the infrastructure findings, which count with these
    from harness.model.records import Attempt

# Attempt statuses of work that never ran: neither a pass nor a failure.
NOT_RUN: frozenset[str] = frozenset({"skipped", "budget_declined"})
# The error type of an attempt the harness broke (:func:`harness_fault`).
HARNESS_FAULT = "HarnessInternalError"


@dataclass(frozen=True)
class Run:
    """One measured (round, repeat) slot: every try it took, the last one final."""

    round: int
    repeat: int
    tries: tuple[Attempt, ...]

    @property
    def final(self) -> Attempt:
        return self.tries[-1]

    @property
    def retried(self) -> bool:
        """A try of this slot failed and another was made (whatever the last one did)."""
        return any(t.status in FAILING for t in self.tries[:-1])


def _slots(
    attempts: Iterable[Attempt], *, warmup: bool, rounds: Collection[int] | None = None
) -> list[Run]:
    slots: dict[tuple[int, int], list[Attempt]] = {}
    for a in attempts:
        if a.warmup != warmup or a.status == "budget_declined":
            continue
        if rounds is not None and a.round not in rounds:
            continue
        slots.setdefault((a.round, a.repeat), []).append(a)
    return [Run(r, p, tuple(ts)) for (r, p), ts in sorted(slots.items())]


def runs(attempts: Iterable[Attempt], rounds: Collection[int] | None = None) -> list[Run]:
    """The measured runs (warm-ups excluded), ordered by (round, repeat); ``rounds`` keeps
    only those rounds. A slot whose only attempt was declined by the budget never ran and
    is left out."""
    return _slots(attempts, warmup=False, rounds=rounds)


def warmup_runs(attempts: Iterable[Attempt]) -> list[Run]:
    """The warm-up runs, as :func:`runs` gives the measured ones."""
    return _slots(attempts, warmup=True)


def finals(attempts: Iterable[Attempt], rounds: Collection[int] | None = None) -> list[Attempt]:
    """The final attempt of each measured run, in (round, repeat) order."""
    return [r.final for r in runs(attempts, rounds)]


def passing_finals(
    attempts: Iterable[Attempt], rounds: Collection[int] | None = None
) -> list[Attempt]:
    """The final attempts that passed: the latency and quality samples."""
    return [a for a in finals(attempts, rounds) if a.status == "passed"]


def ran(attempts: Iterable[Attempt]) -> list[Attempt]:
    """Every attempt that ran, warm-ups and replaced tries included, in recorded order."""
    return [a for a in attempts if a.status not in NOT_RUN]


def harness_fault(attempt: Attempt) -> bool:
    """An attempt the harness itself broke (a ``HarnessInternalError``: a bug of the harness
    or a worker that broke the protocol): no run of the code under test, neither its pass nor
    its failure. The run that holds it is incomplete (exit 3)."""
    return attempt.error is not None and attempt.error.type == HARNESS_FAULT


def failed_tries(attempts: Iterable[Attempt]) -> list[Attempt]:
    """Every attempt that ran and failed (warm-ups and tries a retry replaced included)."""
    return [a for a in ran(attempts) if a.status in FAILING]


def failure_signature(attempt: Attempt) -> str:
    """What a failed attempt's failure was: its infrastructure signature when it has one
    (``HTTP 403 <url>``: the same on both sides whatever token the URL carried), else its error
    signature, else its status."""
    if attempt.infra:
        return attempt.infra
    return attempt.error.signature if attempt.error else attempt.status


def judged_seconds(attempt: Attempt, *, contention_free: bool) -> dict[str, float]:
    """Seconds per stage (in stage order) and ``total`` for one attempt, as latency is judged.

    With ``contention_free`` each is wall time less the run-queue delay recorded for it
    (``stage_wait`` / ``wait_s``; none recorded reads as none), never below zero: the code's
    own time, whatever other processes did. Without, wall time. Stages that read 0 are left
    out (too short to time, or never timed)."""
    out: dict[str, float] = {}
    waits = attempt.stage_wait if contention_free else {}
    for stage, secs in attempt.stages.items():
        v = float(secs) - float(waits.get(stage, 0.0))
        if secs > 0:
            out[stage] = max(v, 0.0)
    total = attempt.duration_s - (attempt.wait_s if contention_free else 0.0)
    if attempt.duration_s > 0:
        out["total"] = max(float(total), 0.0)
    return out


def stage_samples(attempts: Iterable[Attempt]) -> dict[str, list[float]]:
    """Wall seconds per stage, in stage order, over the passing finals (:func:`passing_finals`);
    ``total`` holds each one's whole duration."""
    samples: dict[str, list[float]] = {}
    for a in passing_finals(attempts):
        for stage, secs in a.stages.items():
            samples.setdefault(stage, []).append(secs)
        samples.setdefault("total", []).append(a.duration_s)
    return samples


def stage_medians(attempts: Iterable[Attempt]) -> dict[str, float]:
    """The median wall seconds of each stage (and ``total``) over the passing finals."""
    return {k: statistics.median(v) for k, v in stage_samples(attempts).items()}


def counts_as_passed(attempts: Sequence[Attempt]) -> bool:
    """True when at least one measured run exists and every final passed. Skipped and
    budget-declined runs are never passes."""
    fs = finals(attempts)
    return bool(fs) and all(a.status == "passed" for a in fs)
