"""``harness run --changed-since REV --coverage-from REPORT``: the cases whose last recorded
coverage touches a file changed since ``REV`` (the working tree against it, untracked files
included), always keeping cases with no coverage on record, and saying which were left out and
why. Whatever goes wrong (a revision that does not resolve, a report that cannot be read,
coverage recorded at another revision) is an ``error`` of the selection: every case runs and
the report says why none was left out.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.cases import PlanItem
from harness.compare.diff import ChangeSet, changed_since, files_touched
from harness.model import RunReport
from harness.model.coverage import CoverageRecord


def read_coverage(path: Path) -> tuple[dict[tuple[str, str], CoverageRecord], str | None]:
    """Each case's coverage in the report at ``path`` (a run folder or its report.json),
    keyed by (case id, platform), or why it cannot be read."""
    file = path / "report.json" if path.is_dir() else path
    try:
        report = RunReport.from_json(json.loads(file.read_text()))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return {}, f"--coverage-from {path}: cannot read a run report at {file} ({exc})"
    return {(c.id, c.platform): c.coverage for c in report.cases if c.coverage}, None


def _selection(changed: str, source: Path | None, **kw: Any) -> dict[str, Any]:
    return {
        "changed_since": changed,
        "coverage_from": str(source) if source is not None else None,
        "applied": False,
        "error": None,
        "kept": [],
        "left_out": [],
        **kw,
    }


def _why_kept(
    item: PlanItem, cov: CoverageRecord | None, changes: ChangeSet, repo: Path
) -> str | None:
    """Why ``item`` runs (None: it may be left out)."""
    source = Path(item.case.source).resolve()
    if source.is_relative_to(repo) and source.relative_to(repo).as_posix() in changes.paths:
        return "its case file changed"
    if cov is None:
        return "no coverage on record"
    if cov.status != "recorded":
        return f"no coverage on record ({cov.message})"
    if cov.outside:
        return (
            f"its code root lies outside the repository ({', '.join(cov.outside)}): its "
            "coverage cannot be matched with the change"
        )
    touched = files_touched(cov.files, changes)
    if touched:
        more = f", +{len(touched) - 3} more" if len(touched) > 3 else ""
        return f"executes changed file(s) {', '.join(touched[:3])}{more}"
    return None


def select_changed(
    items: Sequence[PlanItem], rev: str, coverage_from: Path | None, repo: Path
) -> tuple[list[PlanItem], dict[str, Any]]:
    """The items to run and the report's ``selection`` record."""
    if coverage_from is None:
        error = (
            f"--changed-since {rev} needs --coverage-from REPORT (a run recorded with --coverage)"
        )
        return list(items), _selection(rev, None, error=error)
    changes = changed_since(repo, rev)
    if changes.error is not None:
        return list(items), _selection(rev, coverage_from, error=changes.error)
    records, unread = read_coverage(coverage_from)
    if unread is not None:
        return list(items), _selection(rev, coverage_from, error=unread, rev=changes.base)
    revs = sorted({r.rev for r in records.values() if r.rev})
    others = [r for r in revs if r != changes.base]
    if others:
        error = (
            f"--coverage-from {coverage_from}: coverage recorded at revision "
            f"{', '.join(r[:12] for r in others)}, not at --changed-since {rev} "
            f"({changes.base[:12]}): refused (run `harness run --coverage` at {rev}, or pass "
            f"--changed-since {others[0][:12]})"
        )
        return list(items), _selection(rev, coverage_from, error=error, rev=changes.base)
    kept: list[PlanItem] = []
    sel = _selection(
        rev,
        coverage_from,
        applied=True,
        rev=changes.base,
        coverage_rev=revs[0] if revs else None,
        changed_files=sorted(changes.paths),
    )
    for item in items:
        why = _why_kept(item, records.get((item.case.id, item.platform)), changes, repo)
        if why is not None:
            kept.append(item)
            sel["kept"].append({"name": item.name, "why": why})
        else:
            n = len(changes.paths)
            sel["left_out"].append(
                {
                    "name": item.name,
                    "why": f"its coverage recorded at {revs[0][:12] if revs else rev} "
                    f"touches none of the {n} file(s) changed since {rev}",
                }
            )
    return kept, sel


__all__ = ["read_coverage", "select_changed"]
