"""What a coverage attempt recorded for one case on one side (:class:`CoverageRecord`), and
the compact spelling of line sets (``"1-3,7"``) it is stored in.

Files are relative to the repository root of the code under test (a comparison's checkout, a
run's git top level), so two sides and two revisions name a file alike.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


def spell_lines(lines: Iterable[int]) -> str:
    """``[1, 2, 3, 7]`` as ``"1-3,7"``.

    >>> spell_lines([7, 1, 2, 3]), spell_lines([])
    ('1-3,7', '')
    """
    out: list[str] = []
    run: list[int] = []
    for n in sorted(set(lines)):
        if run and n == run[-1] + 1:
            run.append(n)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [n]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


def read_lines(text: str) -> frozenset[int]:
    """Inverse of :func:`spell_lines`.

    >>> sorted(read_lines("1-3,7"))
    [1, 2, 3, 7]
    """
    out: set[int] = set()
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return frozenset(out)


@dataclass(frozen=True)
class CoverageRecord:
    """One case's coverage attempt on one side.

    ``status`` is ``recorded`` (``files`` holds what ran), ``error`` (coverage could not be
    taken: ``message`` says why) or ``not_measured`` (a command, server or multi-rank case:
    its code runs in processes the worker's tracer does not see). ``rev`` is the git commit
    the code ran at (None: not a git checkout). ``outside`` lists code roots that lie outside
    the repository (their lines cannot be matched with a diff), ``attempt_status`` the
    coverage attempt's own status.
    """

    status: str
    rev: str | None = None
    sources: tuple[str, ...] = ()
    files: Mapping[str, str] = field(default_factory=dict)  # repo-relative path -> lines
    outside: tuple[str, ...] = ()
    message: str | None = None
    attempt_status: str | None = None
    duration_s: float | None = None

    def lines(self, path: str) -> frozenset[int]:
        text = self.files.get(path)
        return read_lines(text) if text else frozenset()

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "rev": self.rev,
            "sources": list(self.sources),
            "files": dict(self.files),
            "outside": list(self.outside),
            "message": self.message,
            "attempt_status": self.attempt_status,
            "duration_s": self.duration_s,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> CoverageRecord:
        return cls(
            status=d["status"],
            rev=d.get("rev"),
            sources=tuple(d.get("sources", ())),
            files=dict(d.get("files", {})),
            outside=tuple(d.get("outside", ())),
            message=d.get("message"),
            attempt_status=d.get("attempt_status"),
            duration_s=d.get("duration_s"),
        )


# How triage orders cases whose verdicts are alike: what it found, most likely head's first.
_RANK = {"executes": 0, "no_coverage": 1, "no_diff": 1, "outside": 1, "none": 2}


def triage_rank(triage: Mapping[str, Any] | None) -> int:
    """0 executes head's change, 1 unknown (no coverage, no diff, not triaged), 2 none
    (a comparison case's ``triage``, harness.compare.triage)."""
    if not triage:
        return 1
    return _RANK.get(str(triage.get("status")), 1)


__all__ = ["CoverageRecord", "read_lines", "spell_lines", "triage_rank"]
