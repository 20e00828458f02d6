"""``harness bisect``: the first bad commit between a good and a bad one, by the comparison's
own verdict engine.

Each step is one :func:`~harness.compare.run.compare_revisions` of the good commit (base)
against the step's commit (head) for the one case. A step is **bad** when the case fails or
regresses against the good commit (verdict ``regression`` or ``new_failure``), **good**
otherwise, and **skipped** when the commit does not build: its checkout lacks the code roots,
or every failure of the case on it is a SyntaxError / ImportError (while the good commit runs),
the Python equivalent of a commit that does not compile. Skipped commits are recorded, and the
search moves to the nearest untested commit instead, as ``git bisect skip`` does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from harness.compare.run import CompareRequest, compare_revisions
from harness.compare.worktree import git, resolve
from harness.errors import UsageError
from harness.fsio import write_json_atomic
from harness.model import CaseComparison, signature_type

BAD_VERDICTS = frozenset({"regression", "new_failure"})
_NO_BUILD = ("SyntaxError", "IndentationError", "ImportError", "ModuleNotFoundError")


@dataclass(frozen=True)
class Step:
    """One tested commit: ``status`` good | bad | skip, the case verdict and why."""

    sha: str
    subject: str
    status: str
    verdict: str | None
    reason: str | None
    comparison: str | None  # folder of the step's comparison

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class BisectResult:
    good: str
    bad: str
    case: str
    first_bad: str | None  # None when skipped commits hide it (see ``candidates``)
    candidates: tuple[str, ...]  # commits that may be the first bad one
    steps: tuple[Step, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "good": self.good,
            "bad": self.bad,
            "case": self.case,
            "first_bad": self.first_bad,
            "candidates": list(self.candidates),
            "steps": [s.to_json() for s in self.steps],
            "skipped": [s.sha for s in self.steps if s.status == "skip"],
        }


def _no_build(c: CaseComparison) -> bool:
    f = c.failures
    if f.head_failed == 0 or f.head_passed or not f.head_signatures:
        return False
    if f.base_failed and not f.base_passed:
        return False
    return all(signature_type(s) in _NO_BUILD for s in f.head_signatures)


def bisect(
    good: str,
    bad: str,
    case: str,
    *,
    request: CompareRequest,
    say: Callable[[str], None] = lambda _l: None,
) -> BisectResult:
    """Binary search over ``good..bad`` (ancestry path) for the first bad commit of ``case``."""
    repo = request.repo
    good_sha, bad_sha = resolve(repo, good), resolve(repo, bad)
    listed = git(repo, "rev-list", "--reverse", "--ancestry-path", f"{good_sha}..{bad_sha}")
    commits = listed.split()
    if not commits:
        raise UsageError(f"--bad {bad}: not a descendant of --good {good} (nothing to bisect)")
    bisect_id = request.comparison_id or f"bisect-{good_sha[:8]}-{bad_sha[:8]}"
    out = request.out_root / bisect_id
    steps: list[Step] = []
    status: dict[int, str] = {}

    def test(i: int) -> str:
        sha = commits[i]
        subject = git(repo, "log", "-1", "--format=%s", sha)
        sub = replace(
            request,
            case_ids=(case,),
            out_root=out,
            comparison_id=f"{len(steps):02d}-{sha[:10]}",
        )
        say(f"bisect: testing {sha[:10]} {subject!r} ({len(commits)} commit(s) in range)")
        try:
            cmp = compare_revisions(good_sha, sha, request=sub)
        except UsageError as exc:
            steps.append(Step(sha, subject, "skip", None, str(exc), None))
            return "skip"
        if not cmp.cases:
            steps.append(Step(sha, subject, "skip", None, "case not selected", None))
            return "skip"
        c = cmp.cases[0]
        where = str(out / sub.comparison_id) if sub.comparison_id else None
        if _no_build(c):
            steps.append(
                Step(sha, subject, "skip", c.verdict, f"does not build: {c.reason}", where)
            )
            return "skip"
        verdict = "bad" if c.verdict in BAD_VERDICTS else "good"
        steps.append(Step(sha, subject, verdict, c.verdict, c.reason, where))
        say(f"bisect: {sha[:10]} is {verdict} ({c.verdict})")
        return verdict

    lo, hi = -1, len(commits) - 1  # commits[lo] is good (lo = -1: the good commit), hi bad
    while True:
        untested = [i for i in range(lo + 1, hi) if i not in status]
        if not untested:
            break
        mid = (lo + hi) // 2
        # nearest untested commit to the midpoint (skipped ones are never retried)
        pick = min(untested, key=lambda i: (abs(i - mid), i))
        status[pick] = test(pick)
        if status[pick] == "bad":
            hi = pick
        elif status[pick] == "good":
            lo = pick
    last = len(commits) - 1
    if hi == last and last not in status and lo == last - 1:
        # the answer would be --bad itself: test it, so the answer comes with its evidence
        status[last] = test(last)
        if status[last] == "good":
            hi = last + 1  # nothing bad in range
    candidates = tuple(commits[i] for i in range(lo + 1, min(hi, last) + 1))
    if hi > last:
        candidates = ()
    result = BisectResult(
        good_sha,
        bad_sha,
        case,
        candidates[0]
        if len(candidates) == 1 and status.get(commits.index(candidates[0])) != "skip"
        else None,
        candidates,
        tuple(steps),
    )
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "bisect.json", result.to_json())
    return result


def evidence(result: BisectResult) -> Step | None:
    """The step that tested the first bad commit (its comparison is the evidence)."""
    return next((s for s in result.steps if s.sha == result.first_bad), None)


__all__ = ["BisectResult", "Step", "bisect", "evidence"]
