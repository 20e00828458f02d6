"""Isolation between attempts that share a persistent worker.

:func:`isolated` snapshots the process-global state a target can reach before an attempt and
restores it after; what it cannot restore, it reports, and :meth:`Guard.apply` turns that into
a failure of the attempt that caused it (and asks the manager to replace the worker), so no
case can change the result of the case after it.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from harness.model import Attempt, ErrorInfo
from harness.worker.protocol import AttemptJob


@dataclass
class Guard:
    """What an attempt changed that could not be put back (empty when it left no trace)."""

    violations: list[str] = field(default_factory=list)

    def apply(self, attempt: Attempt) -> Attempt:
        """The attempt, failed with a message naming what it changed, when it changed any."""
        if not self.violations:
            return attempt
        what = "; ".join(self.violations)
        error = ErrorInfo.make(
            "IsolationViolation",
            f"the case changed its worker process and that cannot be undone: {what}; "
            "the worker is replaced before the next case",
        )
        return replace(
            attempt,
            status="failed" if attempt.status == "passed" else attempt.status,
            error=attempt.error if attempt.status != "passed" else error,
            notes={**attempt.notes, "harness.isolation": what},
        )


@contextlib.contextmanager
def isolated(job: AttemptJob) -> Iterator[Guard]:
    """Snapshot before, restore after, record what cannot be restored."""
    guard = Guard()
    cwd = os.getcwd()
    environ = dict(os.environ)
    path = list(sys.path)
    try:
        yield guard
    finally:
        with contextlib.suppress(OSError):
            os.chdir(cwd)
        if dict(os.environ) != environ:
            os.environ.clear()
            os.environ.update(environ)
        if sys.path != path:
            sys.path[:] = path
