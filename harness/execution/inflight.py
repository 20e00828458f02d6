"""The next attempt, sent before its turn: the manager's side of the worker pipeline.

A worker answers one attempt and then waits for the next, and the manager records each answer
(the journal, the case's result, the next job's JSON) before it sends the next: the two worked
in turn. When the attempt just answered passed and the next one is certain, the executor sends
that next attempt to the same worker at once and records the answer while the worker runs it.

The next attempt is certain when nothing the manager has not yet done can change it: the
attempt passed (so no retry and no stop of its case), the run does not stop at a failing case
(``--fail-fast``) or run a coverage attempt after it, and it is a plain attempt of the same
worker (same side, platform and worker, not a fresh process, a served case or a multi-rank
case, whose workers the executor starts and stops around them). The worker still runs one
attempt at a time, each inside its own isolation, in plan order, so what ran before and the
order of the cases are what they were; only the manager's bookkeeping moves. The attempt's
deadline runs from the moment it was sent. A stop requested while it runs lets it finish and
records it, like any attempt in flight; a second Ctrl-C kills the worker as before.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness.cases import PlanItem
from harness.execution.pool import WorkerCrashed, WorkerHandle, WorkerSpec
from harness.execution.retry import oom_kill_count
from harness.model import Attempt, Case, Side
from harness.worker import protocol as p

__all__ = ["Ahead", "InFlight", "Job", "Pipeline", "pipelinable"]


@dataclass(frozen=True)
class Ahead:
    """The attempt that runs next if the current one passes (its first try)."""

    side: Side
    item: PlanItem
    index: int
    repeat: int
    warmup: bool = False
    round: int = 0


@dataclass(frozen=True)
class Job:
    """One attempt, prepared: what identifies it, its case as resolved, the job for the worker,
    the record it starts from, and the worker it goes to."""

    key: tuple[Any, ...]  # (side, item name, index, repeat, retry, warmup, round)
    item: PlanItem
    case: Case
    job: p.AttemptJob
    base: Attempt
    spec: WorkerSpec


@dataclass(frozen=True)
class InFlight:
    """An attempt sent ahead: its request, when it was sent (``perf_counter``) and its deadline
    (``time.monotonic``), the OOM counter before it, the crash its sending met, if any
    (recorded against it when its turn comes, as it would have been), and when it started."""

    job: Job
    handle: WorkerHandle
    request: p.AttemptRequest
    sent: float = field(default_factory=time.perf_counter)
    deadline: float = 0.0
    oom_before: int | None = None
    failed: WorkerCrashed | None = None
    started_at: str = ""  # when it was sent (the record the manager writes if it fails)

    @property
    def key(self) -> tuple[Any, ...]:
        return self.job.key


def _plain(case: Case) -> bool:
    return not case.fresh_process and case.server is None and case.ranks <= 1


def pipelinable(now: Job, ahead: Ahead) -> bool:
    """Whether ``ahead`` may go to ``now``'s worker while ``now`` is recorded: both plain
    attempts (no fresh process, server or ranks) of the same side and platform."""
    return (
        _plain(now.case)
        and _plain(ahead.item.case)
        and now.key[0] == ahead.side
        and now.item.platform == ahead.item.platform
        and not now.job.coverage
    )


class Pipeline:
    """The executor's attempt in flight ahead of its turn, and the next one, prepared while the
    worker runs the current one. ``prepare`` makes the job of an :class:`Ahead` (or the error
    attempt of one that cannot run)."""

    def __init__(self, prepare: Callable[[Ahead], Job | Attempt]) -> None:
        self.prepare = prepare
        self.flight: InFlight | None = None
        self.sent = 0  # how many attempts were sent before their turn
        self._next: tuple[Job, str] | None = None

    def take(self) -> InFlight | None:
        """The attempt in flight, now the caller's to read (None when there is none)."""
        flight, self.flight = self.flight, None
        return flight

    def in_flight(self, side: Side, name: str) -> bool:
        return self.flight is not None and self.flight.key[:2] == (side, name)

    def warm(self, ahead: Ahead, now: Job) -> None:
        """While the worker runs ``now``: prepare ``ahead`` and its job's JSON, so that only
        its nonce is left to add when it is sent (the worker waits less between the two)."""
        self._next = None
        if pipelinable(now, ahead):
            job = self.prepare(ahead)
            if isinstance(job, Job):
                self._next = (job, p.job_text(job.job))

    def send(self, ahead: Ahead, now: Job, handle: WorkerHandle, *, live: bool) -> None:
        """Send ``ahead`` to ``handle`` (``live``: still the pool's worker of ``now``) now,
        when it is a plain attempt of the same worker."""
        made, self._next = self._next, None
        if not live or not pipelinable(now, ahead):
            return
        key = (ahead.side, ahead.item.name, ahead.index, ahead.repeat, 0, ahead.warmup)
        text: str | None = None
        if made is not None and made[0].key == (*key, ahead.round):
            job: Job | Attempt = made[0]  # prepared while the worker ran `now`
            text = made[1]
        else:
            job = self.prepare(ahead)
        if not isinstance(job, Job) or job.spec != now.spec:
            return
        oom_before = oom_kill_count()
        request = p.AttemptRequest(handle.next_nonce(), job.job)
        line = None if text is None else p.encode_attempt(request.nonce, text)
        failed: WorkerCrashed | None = None
        sent = time.perf_counter()
        try:
            handle.send(request, line=line)
        except WorkerCrashed as exc:  # recorded against that attempt, as it would have been
            failed = exc
        deadline = time.monotonic() + job.case.timeout_s
        started = dt.datetime.now(dt.UTC).isoformat()
        self.flight = InFlight(job, handle, request, sent, deadline, oom_before, failed, started)
        self.sent += 1
