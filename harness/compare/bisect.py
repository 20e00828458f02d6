"""``harness bisect``: the first bad commit between a good and a bad one, by the comparison's
own verdict engine.

Each step is one :func:`~harness.compare.run.compare_revisions` of the good commit (base)
against the step's commit (head) for the one case. A step is **bad** when the case fails or
regresses against the good commit (verdict ``regression`` or ``new_failure``), **good** when the
comparison says so (``no_change``, ``improvement``, ``fixed``, ``pre_existing_failure``,
``inconclusive``), and **skipped** otherwise, as ``git bisect skip`` does: the commit does not
build (its checkout lacks the code roots, or every failure of the case on it is a SyntaxError /
ImportError while the good commit runs), or the step could not tell (``flaky``, ``suspect``,
``missing``, ``not_comparable``, or a comparison whose exit code says it is incomplete: an
infrastructure error, a load error, nothing ran). A step that could not tell is never good.
Skipped commits are recorded, and the search moves to the nearest untested commit instead.

An interrupt (Ctrl-C, SIGTERM) aborts the search: ``bisect.json`` is written with the steps so
far and ``interrupted: true``, and :class:`BisectInterrupted` carries the partial result. Each
bisect writes a folder of its own (``bisect-<good>-<bad>-<stamp>``), never an earlier one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness.compare.run import CompareRequest, compare_revisions
from harness.compare.worktree import git, resolve
from harness.errors import UsageError
from harness.execution.run import new_run_id
from harness.fsio import write_json_atomic
from harness.model import CaseComparison, signature_type

BAD_VERDICTS = frozenset({"regression", "new_failure"})
# Verdicts that decide nothing about the step: skipped, never counted good.
UNDECIDED_VERDICTS = frozenset({"flaky", "suspect", "missing", "not_comparable", "infrastructure"})
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
    interrupted: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "good": self.good,
            "bad": self.bad,
            "case": self.case,
            "first_bad": self.first_bad,
            "candidates": list(self.candidates),
            "steps": [s.to_json() for s in self.steps],
            "skipped": [s.sha for s in self.steps if s.status == "skip"],
            "interrupted": self.interrupted,
        }


class BisectInterrupted(KeyboardInterrupt):
    """The bisect was interrupted; ``result`` holds the steps so far (already written)."""

    def __init__(self, result: BisectResult, out: Path) -> None:
        super().__init__(f"bisect interrupted after {len(result.steps)} step(s)")
        self.result = result
        self.out = out


def step_status(c: CaseComparison, exit_code: int) -> tuple[str, str | None]:
    """``(good | bad | skip, why skipped)`` of a step's case comparison; ``exit_code`` is the
    step comparison's own (:meth:`Comparison.exit_code`): 2, 3 or 5 mean it is incomplete."""
    if _no_build(c):
        return "skip", f"does not build: {c.reason}"
    if c.verdict in BAD_VERDICTS:
        return "bad", None
    if c.verdict in UNDECIDED_VERDICTS:
        return "skip", f"{c.verdict} decides nothing: {c.reason}"
    if exit_code in (2, 3, 5):
        return "skip", f"comparison incomplete (exit {exit_code}): {c.reason}"
    return "good", None


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
    interrupted: Callable[[], bool] = lambda: False,
) -> BisectResult:
    """Binary search over ``good..bad`` (ancestry path) for the first bad commit of ``case``.

    ``interrupted`` says whether a stop was asked for (a step's comparison catches Ctrl-C
    itself and returns what it judged); then, or on a KeyboardInterrupt, the search stops and
    raises :class:`BisectInterrupted` with the steps so far, written to ``bisect.json``."""
    repo = request.repo
    good_sha, bad_sha = resolve(repo, good), resolve(repo, bad)
    listed = git(repo, "rev-list", "--reverse", "--ancestry-path", f"{good_sha}..{bad_sha}")
    commits = listed.split()
    if not commits:
        raise UsageError(f"--bad {bad}: not a descendant of --good {good} (nothing to bisect)")
    bisect_id = request.comparison_id or f"bisect-{good_sha[:8]}-{bad_sha[:8]}-{new_run_id()}"
    out = request.out_root / bisect_id
    try:
        out.mkdir(parents=True, exist_ok=False)
    except FileExistsError:
        raise UsageError(f"--id {bisect_id}: {out} already exists; pick another") from None
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
            coverage=False,  # a step asks whether the case regressed, not what it executed
        )
        say(f"bisect: testing {sha[:10]} {subject!r} ({len(commits)} commit(s) in range)")
        try:
            cmp = compare_revisions(good_sha, sha, request=sub)
        except KeyboardInterrupt:
            steps.append(Step(sha, subject, "skip", None, "interrupted", None))
            raise
        except UsageError as exc:
            steps.append(Step(sha, subject, "skip", None, str(exc), None))
            return "skip"
        if not cmp.cases:
            steps.append(Step(sha, subject, "skip", None, "case not selected", None))
            return "skip"
        c = cmp.cases[0]
        where = str(out / sub.comparison_id) if sub.comparison_id else None
        verdict, why = step_status(c, cmp.exit_code())
        if interrupted():
            # the step's comparison was cut short: what it judged decides nothing
            steps.append(Step(sha, subject, "skip", c.verdict, "interrupted", where))
            raise KeyboardInterrupt
        steps.append(Step(sha, subject, verdict, c.verdict, why or c.reason, where))
        say(f"bisect: {sha[:10]} is {verdict} ({c.verdict})")
        return verdict

    lo, hi = -1, len(commits) - 1  # commits[lo] is good (lo = -1: the good commit), hi bad
    last = len(commits) - 1
    try:
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
        if hi == last and last not in status and lo == last - 1:
            # the answer would be --bad itself: test it, so the answer comes with its evidence
            status[last] = test(last)
            if status[last] == "good":
                hi = last + 1  # nothing bad in range
    except KeyboardInterrupt:
        partial = BisectResult(good_sha, bad_sha, case, None, (), tuple(steps), interrupted=True)
        write_json_atomic(out / "bisect.json", partial.to_json())
        raise BisectInterrupted(partial, out) from None
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
    write_json_atomic(out / "bisect.json", result.to_json())
    return result


def evidence(result: BisectResult) -> Step | None:
    """The step that tested the first bad commit (its comparison is the evidence)."""
    return next((s for s in result.steps if s.sha == result.first_bad), None)


__all__ = ["BisectInterrupted", "BisectResult", "Step", "bisect", "evidence", "step_status"]
