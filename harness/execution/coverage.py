"""Coverage attempts on the manager side: what one measures (:func:`coverage_sources`), and
the worker's absolute file names turned into a :class:`~harness.model.CoverageRecord` whose
files are relative to the repository of the code under test (:func:`to_record`).

A coverage attempt is one extra attempt of a case, run after its timed attempts (never among
them, so latency stays clean), with no retries, in the warm worker that ran them; it is not
one of the case's attempts and counts for nothing but the coverage it records.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import harness
from harness.cases import PlanItem
from harness.model import Attempt, Case, Side
from harness.model.coverage import CoverageRecord, spell_lines
from harness.platforms.profile import Profile

if TYPE_CHECKING:
    from harness.execution.executor import Executor

_HARNESS_DIR = str(Path(harness.__file__).resolve().parent)

# Case shapes whose code under test runs in processes the worker's tracer does not see: their
# coverage attempt is not run.
_ELSEWHERE = "its code runs in other processes (a command, a server, ranks)"


def git_root(folder: Path) -> tuple[Path | None, str | None]:
    """The git top level of ``folder`` and its HEAD commit (None, None outside a repository)."""
    try:
        out = subprocess.run(
            ["git", "-C", str(folder), "rev-parse", "--show-toplevel", "HEAD"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None, None
    lines = out.stdout.split()
    if out.returncode != 0 or len(lines) != 2:
        return None, None
    return Path(lines[0]).resolve(), lines[1]


def coverage_sources(
    code_roots: Sequence[str], case_root: Path | None, packages: Sequence[str]
) -> tuple[str, ...]:
    """The folders (absolute) and packages a coverage attempt measures, without repeats."""
    out: list[str] = []
    for s in (*([str(case_root)] if case_root is not None else []), *code_roots, *packages):
        if s not in out:
            out.append(s)
    return tuple(out)


def _inside(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
    except ValueError:
        return False
    return True


def to_record(
    raw: Mapping[str, Any] | None,
    attempt: Attempt,
    *,
    case: Case,
    repo: Path | None,
    rev: str | None,
    sources: Sequence[str],
) -> CoverageRecord:
    """The record of one coverage attempt: files relative to ``repo`` (files outside it, and
    the harness's own, are left out; code roots outside it are named in ``outside``)."""
    common: dict[str, Any] = {
        "rev": rev,
        "sources": tuple(sources),
        "attempt_status": attempt.status,
        "duration_s": attempt.duration_s,
    }
    if raw is None or raw.get("error") or "files" not in raw:
        why = (raw or {}).get("error") or (
            f"the coverage attempt did not finish ({attempt.status}"
            + (f": {attempt.error.message}" if attempt.error else "")
            + ")"
        )
        return CoverageRecord(status="error", message=str(why)[:500], **common)
    root = repo.resolve() if repo is not None else None
    outside = tuple(
        s
        for s in sources
        if os.path.isabs(s) and (root is None or not _inside(Path(s).resolve(), root))
    )
    files: dict[str, str] = {}
    for name, lines in sorted(raw["files"].items()):
        path = Path(name).resolve()
        if str(path).startswith(_HARNESS_DIR + os.sep) or root is None:
            continue
        if _inside(path, root) and lines:
            files[path.relative_to(root).as_posix()] = spell_lines(lines)
    notes = []
    if root is None:
        notes.append("the code under test is not in a git repository: no file can be matched")
    if outside:
        where = root if root is not None else "no repository"
        notes.append(
            f"case '{case.id}': code root(s) {', '.join(outside)} lie outside the repository "
            f"({where}); their lines cannot be matched with a diff"
        )
    return CoverageRecord(
        status="recorded",
        files=files,
        outside=outside,
        message="; ".join(notes) or None,
        **common,
    )


def coverage_attempt(
    executor: Executor,
    side: Side,
    item: PlanItem,
    *,
    roots: Sequence[str],
    profile: Profile,
    say: Callable[[str], None],
) -> CoverageRecord:
    """One coverage attempt of ``item`` on ``side``, outside its timed attempts (no retries,
    not one of its attempts): the lines of ``roots`` (default: the side's code roots), the
    case's own code root and the packages the case and runner profile name that it executed,
    relative to the repository."""
    spec = executor.sides[side]
    roots = tuple(roots) or spec.code_roots
    case = item.case
    if case.command is not None or case.server is not None or case.ranks > 1:
        # the tracer sees only the worker: such a case's code is never in it
        say(f"{item.name} coverage: not measured ({_ELSEWHERE})")
        return CoverageRecord(status="not_measured", message=f"not measured: {_ELSEWHERE}")
    sources = coverage_sources(
        roots, spec.case_root(case), (*profile.coverage_packages, *case.coverage_packages)
    )
    repo, rev = git_root(Path(spec.repo or (roots[0] if roots else spec.cwd or ".")))
    if spec.repo is not None:
        repo = Path(spec.repo).resolve()
    rev = spec.rev or rev
    attempt, raw = executor.run_job(
        side, item, index=0, repeat=0, retry=0, warmup=False, coverage=sources
    )
    record = to_record(raw, attempt, case=case, repo=repo, rev=rev, sources=sources)
    label = f"{side} " if len(executor.sides) > 1 else ""
    say(
        f"{label}{item.name} coverage: "
        + (
            f"{len(record.files)} file(s) executed ({attempt.duration_s:.2f} s)"
            if record.status == "recorded"
            else f"not recorded: {record.message}"
        )
    )
    return record


__all__ = ["coverage_attempt", "coverage_sources", "git_root", "to_record"]
