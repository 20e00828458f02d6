"""A quality check that failed because its output has no reference yet: blessing is the fix.

Apart from :mod:`harness.checks.quality` (numpy, PyAV, the reference store) so that the
manager's hints (`harness run` prints the bless command) import none of them.
"""

from __future__ import annotations

from harness.model import CheckResult

NO_REFERENCE = "no reference yet"


def lacks_reference(check: CheckResult) -> bool:
    """True for a failed quality check whose output has no reference (no store, or nothing
    pinned on the lookup chain): blessing the output is the fix, not a change of code."""
    return check.passed is False and (check.reason or "").startswith(NO_REFERENCE)
