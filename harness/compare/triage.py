"""Diff-aware triage: which of head's changed lines a case executed.

For a case that is not ``no_change``, each side's coverage attempt (its executed lines, files
relative to the repository) is intersected with ``git diff base..head``: head's executed
lines with the lines head added or changed, base's with the lines head removed or changed
(so a deletion in code base ran still counts). The result is one record per case
(:func:`triage_case`) and an order of the findings (:func:`triage_rank`): cases that execute
the change first, cases without coverage next, cases that execute none of it last.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness.compare.diff import ChangeSet, changed_lines, files_touched, where
from harness.model import CaseComparison, RunReport
from harness.model.coverage import CoverageRecord, triage_rank

# Verdicts triage leaves alone (nothing to explain) and orders after the red ones.
_QUIET = frozenset({"no_change", "skipped"})
GREEN = frozenset({"no_change", "skipped", "improvement", "fixed"})


def _refused(cov: CoverageRecord | None, sha: str | None, side: str) -> str | None:
    """Why ``cov`` cannot be used for ``side`` at commit ``sha`` (None: it can)."""
    if cov is None:
        return f"{side}: no coverage recorded"
    if cov.status != "recorded":
        return f"{side}: coverage not recorded ({cov.message})"
    if sha and cov.rev and cov.rev != sha:
        return (
            f"{side}: coverage recorded at revision {cov.rev[:12]}, not {side}'s {sha[:12]}; "
            "refused (its line numbers belong to another revision)"
        )
    return None


def _non_python(changes: ChangeSet, limit: int = 6) -> str:
    names = sorted({f.path for f in changes.other_files})
    more = f", +{len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def triage_case(
    base: CoverageRecord | None,
    head: CoverageRecord | None,
    changes: ChangeSet,
    *,
    sides: tuple[str, ...] = ("base", "head"),
) -> dict[str, Any]:
    """The triage record of one case: ``status`` (``executes``; ``none``; ``outside``: none
    inside the repository but a code root outside it; ``no_coverage``; ``no_diff``), the
    counts and places of the changed lines each side executed, the changed files it executed
    at all, and a one-line ``summary``. ``sides``: the sides whose coverage is expected (a
    single run has only head's)."""
    if changes.error is not None:
        return {"status": "no_diff", "summary": f"no diff: {changes.error}"}
    problems = [
        p
        for side, cov in (("base", base), ("head", head))
        if side in sides and (p := _refused(cov, getattr(changes, side), side))
    ]
    usable = {
        side: cov
        for side, cov in (("base", base), ("head", head))
        if cov is not None and _refused(cov, getattr(changes, side), side) is None
    }
    total = changes.python_lines
    removed_total = sum(len(f.removed) for f in changes.python_files)
    head_hits: dict[str, set[int]] = {}
    base_hits: dict[str, set[int]] = {}
    for f in changes.python_files:
        if "head" in usable and f.added:
            hit = usable["head"].lines(f.path) & f.added
            if hit:
                head_hits[f.path] = set(hit)
        old = f.old_path or f.path
        if "base" in usable and f.removed and f.status != "added":
            hit = usable["base"].lines(old) & f.removed
            if hit:
                base_hits[old] = set(hit)
    touched = sorted(
        set().union(*(files_touched(c.files, changes) for c in usable.values()))
        if usable
        else set()
    )
    outside = sorted({o for c in usable.values() for o in c.outside})
    n_head = sum(len(v) for v in head_hits.values())
    n_base = sum(len(v) for v in base_hits.values())
    record: dict[str, Any] = {
        "head_executed": n_head,
        "head_changed": total,
        "base_executed": n_base,
        "base_changed": removed_total,
        "head_where": where(head_hits),
        "base_where": where(base_hits),
        "files_touched": touched,
        "other_files": sorted({f.path for f in changes.other_files}),
        "outside": outside,
        "notes": problems,
    }
    if not usable:
        record["status"] = "no_coverage"
        record["summary"] = "changed lines not known: " + "; ".join(problems)
        return record
    if n_head or n_base:
        record["status"] = "executes"
        summary = (
            f"executes {n_head} of head's {total} changed Python lines ({where(head_hits)})"
            if n_head
            else f"executes none of head's {total} changed Python lines in head"
        )
        if n_base:
            summary += (
                f"; base executed {n_base} of the {removed_total} lines head removed or "
                f"changed ({where(base_hits)})"
            )
    elif outside:
        record["status"] = "outside"
        summary = (
            "executes none of head's changed Python lines inside the repository; not known "
            f"beyond it: code root(s) {', '.join(outside)} lie outside the repository"
        )
    else:
        record["status"] = "none"
        if total == 0 and removed_total == 0:
            summary = "head changed no Python lines"
        else:
            summary = "executes none of head's changed Python lines"
        if changes.other_files:
            summary += f"; head also changed non-Python files: {_non_python(changes)}"
    if outside and record["status"] == "executes":
        summary += f"; code root(s) outside the repository, not matched: {', '.join(outside)}"
    if problems:
        summary += " (" + "; ".join(problems) + ")"
    record["summary"] = summary
    return record


def order_by_triage(cases: Sequence[CaseComparison], green: frozenset[str]) -> list[CaseComparison]:
    """``cases`` (CaseComparison) with the red ones first, ordered by triage rank (stable
    within a rank), the green ones (``green`` verdicts) after in their order."""
    red = [c for c in cases if c.verdict not in green]
    rest = [c for c in cases if c.verdict in green]
    return sorted(red, key=lambda c: triage_rank(c.triage)) + rest


def apply_triage(
    cases: Sequence[CaseComparison],
    reports: Mapping[Any, RunReport],
    changes: ChangeSet | None,
) -> list[CaseComparison]:
    """Every case that is not ``no_change`` (nor skipped) with its triage record, red cases
    ordered by it (:func:`order_by_triage`); ``cases`` unchanged without a diff."""
    if changes is None:
        return list(cases)

    def coverage(side: str, c: CaseComparison) -> CoverageRecord | None:
        for r in reports[side].cases:
            if r.id == c.id and r.platform == c.platform:
                return r.coverage
        return None

    out = [
        c
        if c.verdict in _QUIET
        else replace(c, triage=triage_case(coverage("base", c), coverage("head", c), changes))
        for c in cases
    ]
    return order_by_triage(out, GREEN)


def saved_changes(reports: Mapping[Any, RunReport], repo: Path) -> ChangeSet | None:
    """``git diff`` between the commits two saved runs ran at, when either recorded coverage
    (None: neither did, so there is nothing to triage); a ChangeSet with ``error`` when a run
    names no commit or ``repo`` does not have them."""
    if not any(c.coverage for r in reports.values() for c in r.cases):
        return None
    shas = {}
    for side in ("base", "head"):
        git = reports[side].env.get("git") or {}
        sha = git.get("sha") if isinstance(git, Mapping) else None
        if not sha:
            return ChangeSet(
                "base", "head", error=f"{side}'s run records no git commit: no diff to triage"
            )
        shas[side] = str(sha)
    return changed_lines(repo, shas["base"], shas["head"])


__all__ = ["GREEN", "apply_triage", "order_by_triage", "saved_changes", "triage_case"]
