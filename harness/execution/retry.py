"""Retry policy: which failures earn another attempt, and whether it fits the time left.

Only outcomes that say nothing about the code under test are retried: infrastructure errors
(a download or HTTP failure, a refused connection), out-of-memory, timeouts. A failed quality
check or assertion never is: retrying it until it passes is how regressions get in.

A server case's readiness timeout (``ServerNotReady``) is not retried blindly: the platform
policy's ``retry.readiness_timeout`` decides (:func:`readiness_decision`), and the attempt
records why it was (``retried_because``) or was not (``not_retried``) retried.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from harness.model import Attempt, ErrorInfo, ran
from harness.model.infra import INFRA_HTTP_CODES as INFRA_HTTP_CODES
from harness.model.infra import describe, infra_signature, looks_like_infrastructure
from harness.platforms.profile import RetryPolicy

INFRA_TYPES = frozenset(
    {
        "ConnectionError",
        "SharedServerDied",  # found dead between cases: not the case's doing
        "ConnectionResetError",
        "ConnectionRefusedError",
        "ConnectionAbortedError",
        "HTTPError",
        "URLError",
        "RemoteDisconnected",
        "IncompleteRead",
        "ProtocolError",
        "ReadTimeout",
        "ConnectTimeout",
        "SSLError",
        "gaierror",
        "ChunkedEncodingError",
        "BrokenPipeError",
        "InfrastructureError",
    }
)
OOM_TYPES = frozenset({"OutOfMemoryError", "MemoryError"})
OOM_PATTERNS: tuple[str, ...] = (
    r"out of memory",
    r"\bOOM\b",
    r"can't allocate memory",
    r"ErrorOutOfMemory",
)
# Kernel and device faults are bugs of the code under test: never retried, whatever a runner
# profile's patterns say (a memory bug that passes on the retry is still a memory bug).
KERNEL_FAULT_PATTERNS: tuple[str, ...] = (
    r"illegal memory access",
    r"illegal address",
    r"misaligned address",
    r"device-side assert",
    r"unspecified launch failure",
    r"Memory access fault",
    r"hipErrorIllegalAddress",
    r"cudaErrorIllegalAddress",
    r"page fault",
    r"segmentation fault",
)
# Evidence that the kernel's OOM killer ended a worker: the memory cgroup's oom_kill counter.
CGROUP_OOM_FILES: tuple[str, ...] = (
    "/sys/fs/cgroup/memory.events",  # cgroup v2: "oom_kill N"
    "/sys/fs/cgroup/memory/memory.oom_control",  # cgroup v1: "oom_kill N"
)
OOM_EVIDENCE = "out of memory: the memory cgroup's oom_kill counter rose"


_open: dict[tuple[str, ...], tuple[int, ...]] = {}


def oom_kill_count(files: Sequence[str] = CGROUP_OOM_FILES) -> int | None:
    """The memory cgroup's OOM-kill counter, or None where no cgroup file says it.

    The files that exist are opened once a process and read again from offset 0 (a cgroup file
    is generated afresh at each read): this runs before every attempt, and opening the file
    each time was ~45 us of a trivial attempt against ~2 us for the read."""
    names = tuple(files)
    fds = _open.get(names)
    if fds is None:
        opened = []
        for name in names:
            try:
                opened.append(os.open(name, os.O_RDONLY | os.O_CLOEXEC))
            except OSError:
                continue
        fds = _open[names] = tuple(opened)
    for fd in fds:
        try:
            text = os.pread(fd, 4096, 0).decode("ascii")
            for line in text.splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            continue
    return None


def is_kernel_fault(message: str) -> bool:
    return any(re.search(p, message, re.I) for p in KERNEL_FAULT_PATTERNS)


def retry_class(attempt: Attempt, policy: RetryPolicy) -> str | None:
    """The retryable class of a failed attempt (``infra``, ``oom``, ``timeout``, ``crashed``),
    or None when it must not be retried."""
    if attempt.status == "timeout":
        return "timeout"
    if attempt.status == "crashed":
        # A SIGKILL is an OOM kill only with the kernel's word for it (the executor adds the
        # cgroup evidence to the message); without it, it is a crash like any other.
        if attempt.error is not None and OOM_EVIDENCE in attempt.error.message:
            return "oom"
        return "crashed"
    if attempt.status != "error" or attempt.error is None:
        return None  # "failed" means an assertion or a check failed: never retried
    etype, message = attempt.error.type, attempt.error.message
    if etype == "HarnessInternalError" or is_kernel_fault(message):
        return None  # a harness bug or a kernel fault is never a reason to try again
    if etype in OOM_TYPES or any(re.search(p, message, re.I) for p in OOM_PATTERNS):
        return "oom"
    if (
        etype in INFRA_TYPES
        or looks_like_infrastructure(message)
        or any(re.search(p, message) for p in policy.patterns)
    ):
        return "infra"
    return None


def should_retry(attempt: Attempt, policy: RetryPolicy) -> str | None:
    """The class that makes this attempt retryable under ``policy``, or None."""
    cls = retry_class(attempt, policy)
    return cls if cls is not None and cls in policy.retry_on else None


@dataclass
class Budget:
    """The run's wall-clock budget; retries must fit in what is left."""

    total_s: float | None
    started: float = field(default_factory=time.monotonic)

    def left(self) -> float | None:
        if self.total_s is None:
            return None
        return self.total_s - (time.monotonic() - self.started)

    @staticmethod
    def estimate(case_attempts: Sequence[Attempt], all_attempts: Sequence[Attempt]) -> float:
        """Expected seconds for one more attempt: the slowest attempt of this case so far
        (a retry tends to cost what the failure cost), else the median of the run so far."""
        own = [a.duration_s for a in case_attempts if a.status != "budget_declined"]
        if own:
            return max(own)
        rest = sorted(a.duration_s for a in all_attempts if a.status != "budget_declined")
        return rest[len(rest) // 2] if rest else 0.0

    def fits(self, estimate: float) -> tuple[bool, float | None]:
        left = self.left()
        return (left is None or estimate <= left), left


def declined_attempt(
    failed: Attempt, cls: str, estimate: float, left: float | None, budget: Budget
) -> Attempt:
    """The record of a retry that was not made because it would not fit the run's budget."""
    return Attempt(
        case_id=failed.case_id,
        platform=failed.platform,
        index=failed.index + 1,
        status="budget_declined",
        seed=failed.seed,
        warmup=failed.warmup,
        retry=failed.retry + 1,
        repeat=failed.repeat,
        started_at=dt.datetime.now(dt.UTC).isoformat(),
        side=failed.side,
        round=failed.round,
        error=ErrorInfo(
            "BudgetDeclined",
            f"retry {failed.retry + 1} of a {cls} failure declined: estimated "
            f"{estimate:.1f} s, {left or 0.0:.1f} s left of the run's "
            f"{budget.total_s:g} s budget",
            "BudgetDeclined",
        ),
        metrics={"seconds_left": round(left or 0.0, 3), "seconds_estimated": round(estimate, 3)},
    )


def previous_try(case_attempts: Sequence[Attempt]) -> Attempt | None:
    """The case's last attempt that ran (a declined retry never did), or None."""
    return next((a for a in reversed(ran(case_attempts))), None)


def mark_infra(attempt: Attempt, cls: str | None, before: Attempt | None) -> Attempt:
    """``attempt`` with its infrastructure signature when its retry class is ``infra``, and
    ``not_retried`` when the try before it (``before``, of the same case) failed with the
    same signature: the retry budget is for flakes, not for a 403 that will not change."""
    if cls != "infra" or attempt.error is None:
        return attempt
    signature = infra_signature(attempt.error.type, attempt.error.message)
    if before is None or before.infra != signature:
        return replace(attempt, infra=signature)
    return replace(
        attempt,
        infra=signature,
        not_retried=f"not retried: same infrastructure failure twice ({describe(signature)})",
    )


READINESS_TIMEOUT = "ServerNotReady"


def readiness_decision(attempt: Attempt, policy: RetryPolicy, retryable: bool) -> Attempt:
    """A readiness timeout with the policy's decision recorded: ``retried_because`` when it
    earns its one retry (``once_if_logs_growing``, the first try, some process's log still
    growing at the deadline, and the case's retries allow one), else ``not_retried``."""
    rule = f"platform policy retry.readiness_timeout = {policy.readiness}"
    hang = attempt.hang
    if policy.readiness.split()[0] == "never":
        why = "a readiness timeout is never retried"
    elif attempt.retry >= 1:
        why = "a readiness timeout is retried at most once"
    elif hang is None:
        why = "no hang diagnosis says the server was still making progress"
    elif not hang.logs_growing:
        why = f"the server looked stuck: {hang.growth_text()}"
    elif not retryable:
        why = f"its logs were growing, but the case allows no retry (retries = {policy.retries})"
    else:
        return replace(attempt, retried_because=f"retried: {hang.growth_text()} ({rule})")
    return replace(attempt, not_retried=f"not retried: {why} ({rule})")


def with_retries(
    run_once: Callable[[int], Attempt],
    *,
    policy: RetryPolicy,
    budget: Budget,
    case_attempts: Sequence[Attempt],
    all_attempts: Sequence[Attempt],
    record: Callable[[Attempt], None],
    stop: Callable[[], bool],
) -> Attempt:
    """Run one warm-up or measured run, retrying retryable failures while the budget allows.

    ``run_once(retry)`` makes one attempt; every attempt (and a declined retry) goes to
    ``record`` as soon as it exists. An infrastructure failure carries its signature
    (:mod:`harness.model.infra`); one that repeats the signature of the case's try before it
    is not retried again (``not_retried`` says so). Returns the final real attempt of the run.
    """
    retry = 0
    while True:
        attempt = run_once(retry)
        cls = retry_class(attempt, policy) if attempt.status != "passed" else None
        retryable = cls is not None and cls in policy.retry_on and retry < policy.retries
        attempt = mark_infra(attempt, cls, previous_try(case_attempts) if retryable else None)
        if cls == "timeout" and attempt.error and attempt.error.type == READINESS_TIMEOUT:
            attempt = readiness_decision(attempt, policy, retryable)
        record(attempt)
        if cls is None or not retryable or attempt.not_retried or stop():
            return attempt
        estimate = Budget.estimate(case_attempts, all_attempts)
        fits, left = budget.fits(estimate)
        if not fits:
            record(declined_attempt(attempt, cls, estimate, left, budget))
            return attempt
        retry += 1
