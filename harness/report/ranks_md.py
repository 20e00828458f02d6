"""The Markdown of a multi-rank case's ranks (``Attempt.ranks``), for ``summary.md``: per case
that ran ranks, the slowest rank of each stage with every rank's seconds, how each rank ended
and the rank-consistency verdict, from the case's last final attempt that has the record
(:func:`harness.model.counting.finals`)."""

from __future__ import annotations

from collections.abc import Iterator

from harness.model import Attempt, CaseResult
from harness.model.counting import finals
from harness.model.ranks import slowest
from harness.report.markdown import md_code, md_text, row


def ranks_attempt(case: CaseResult) -> Attempt | None:
    """The attempt whose ranks the summary shows: the last final one with a record (else the
    last attempt with one, say a warm-up's, when no final has it)."""
    if all(a.ranks is None for a in case.attempts):  # most cases: no finals to sort out
        return None
    with_record = [a for a in finals(case.attempts) if a.ranks is not None]
    if not with_record:
        with_record = [a for a in case.attempts if a.ranks is not None]
    return with_record[-1] if with_record else None


def ranks_lines(case: CaseResult) -> Iterator[str]:
    """The Markdown lines of ``case``'s ranks (none when it ran no ranks)."""
    a = ranks_attempt(case)
    if a is None or a.ranks is None:
        return
    r = a.ranks
    exits = ", ".join(
        f"rank {k}: {v}" for k, v in sorted(r.exits.items(), key=lambda kv: int(kv[0]))
    )
    consistency = f"; rank consistency: {r.consistency}" if r.consistency else ""
    yield (
        f"**Ranks** of {md_code(case.name, table=False)} attempt #{a.index}: "
        + md_text(f"{r.world_size} ranks ({exits}){consistency}")
    )
    rows = slowest(r)
    if not rows:
        return
    ranks = sorted(int(k) for k in r.stages)
    yield ""
    yield row(["stage", "slowest rank", "seconds", *(f"rank {k}" for k in ranks)])
    yield "|" + "---|" * (3 + len(ranks))
    for stage, rank, seconds, every in rows:
        cells = [f"{every[k]:.3f}" if k in every else "-" for k in ranks]
        yield row([md_code(stage), str(rank), f"{seconds:.3f}", *cells])
