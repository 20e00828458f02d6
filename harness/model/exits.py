"""DESIGN's one exit-code policy, shared by every command (run, compare, merge, bisect, the
pytest plugin): the first that applies wins.

- 2: usage or input error, including a case file that does not load on either side;
- 3: infrastructure or incomplete: a harness fault, an interrupted run, a side, shard or case
  that did not run or did not compare, a platform the runner profile promises that is absent;
- 1: a check failed, or a regression, new failure or new flakiness was found;
- 5: nothing ran;
- 7: only flaky results;
- 0: all passed, no blocking finding.

A harness bug is 3, never 1.
"""

from __future__ import annotations

OK = 0
FAILED = 1
USAGE = 2
INCOMPLETE = 3
NOTHING_RAN = 5
ONLY_FLAKY = 7


def exit_status(
    *,
    input_error: bool = False,
    incomplete: bool = False,
    failed: bool = False,
    nothing_ran: bool = False,
    only_flaky: bool = False,
) -> int:
    """The exit code for these facts, in DESIGN's order of precedence."""
    if input_error:
        return USAGE
    if incomplete:
        return INCOMPLETE
    if failed:
        return FAILED
    if nothing_ran:
        return NOTHING_RAN
    if only_flaky:
        return ONLY_FLAKY
    return OK
