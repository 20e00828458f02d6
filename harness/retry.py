"""Retry policy: which failures earn another attempt, and whether it fits the time left.

Only outcomes that say nothing about the code under test are retried: infrastructure errors
(a download or HTTP failure, a refused connection), out-of-memory, timeouts. A failed quality
check or assertion never is: retrying it until it passes is how regressions get in.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from harness.model import Attempt
from harness.profile import RetryPolicy

INFRA_TYPES = frozenset(
    {
        "ConnectionError",
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
INFRA_PATTERNS: tuple[str, ...] = (
    r"\bHTTP(?: Error)? ?(?:403|404|408|429|5\d\d)\b",
    r"\b(?:403|429|502|503|504) (?:Forbidden|Too Many Requests|Bad Gateway|Service Unavailable"
    r"|Gateway Timeout)\b",
    r"Connection (?:reset|refused|aborted)",
    r"Temporary failure in name resolution",
    r"Read timed out",
)
OOM_TYPES = frozenset({"OutOfMemoryError", "MemoryError"})
OOM_PATTERNS: tuple[str, ...] = (r"out of memory", r"\bOOM\b")


def retry_class(attempt: Attempt, policy: RetryPolicy) -> str | None:
    """The retryable class of a failed attempt (``infra``, ``oom``, ``timeout``, ``crashed``),
    or None when it must not be retried."""
    if attempt.status == "timeout":
        return "timeout"
    if attempt.status == "crashed":
        # SIGKILL from outside is the kernel's OOM killer more often than not.
        if attempt.error is not None and "SIGKILL" in attempt.error.message:
            return "oom"
        return "crashed"
    if attempt.status != "error" or attempt.error is None:
        return None  # "failed" means an assertion or a check failed: never retried
    etype, message = attempt.error.type, attempt.error.message
    if etype in OOM_TYPES or any(re.search(p, message, re.I) for p in OOM_PATTERNS):
        return "oom"
    if etype in INFRA_TYPES or any(
        re.search(p, message) for p in (*INFRA_PATTERNS, *policy.patterns)
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
