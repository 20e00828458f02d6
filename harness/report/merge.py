"""Merge the reports of a sharded run into one run report, and check its coverage.

Every shard report (``harness run --shard i/N``) carries the whole plan, its digest and nonce,
and the git tree hash of the code it ran, so the merge checks, without any other input, that
the shards were cut from one plan (same digest and nonce) of one commit (same tree hash),
that no shard is given twice and no case is reported twice, and that every planned case has a
result, or is listed in ``missing`` with the reason: its shard's report was not found, the
shard stopped early (``--fail-fast``), or the shard's report has no result for it.

Example::

    merged = merge_reports([("ci/shard-1", read_report(...)), ("ci/shard-2", read_report(...))])
    write_run(merged, Path("reports/merged"), latest=False)
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from harness.errors import InputError
from harness.model import (
    CaseResult,
    LoadError,
    MergedShard,
    MissingCase,
    MissingCause,
    PlannedCase,
    RunReport,
    ShardInfo,
)

__all__ = ["copy_outputs", "merge_reports", "write_merged"]


def _check_consistent(shards: Sequence[tuple[str, RunReport]]) -> list[tuple[str, ShardInfo]]:
    """Each report is a shard of one plan, each shard given once; the infos, by shard index."""
    if not shards:
        raise InputError("merge: no shard report given")
    infos: list[tuple[str, ShardInfo]] = []
    for path, report in shards:
        if report.shard is None:
            raise InputError(
                f"{path}: report {report.run_id} is not a shard report (no 'shard' key); "
                "merge joins the reports of `harness run --shard i/N`"
            )
        if report.shard.index is None:
            raise InputError(
                f"{path}: report {report.run_id} is already a merged report; merge the shard "
                "reports it came from instead"
            )
        infos.append((path, report.shard))
    by_digest: dict[tuple[str, int, str], list[str]] = {}
    for path, info in infos:
        by_digest.setdefault((info.digest, info.count, info.by), []).append(path)
    if len(by_digest) > 1:
        plans = "; ".join(
            f"{', '.join(paths)}: {count} shard(s) by {by}, plan {digest}"
            for (digest, count, by), paths in by_digest.items()
        )
        raise InputError(
            f"merge: the shard reports come from different plans ({plans}); every shard must "
            "be run with the same cases, -k, platforms, --shards count, --shard-by and "
            "--durations"
        )
    _check_same_origin(shards)
    # A shard is one report, or the parts one pytest-xdist worker each wrote of it (distinct
    # `part`s); a shard given twice, or a whole shard next to a part of it, is refused.
    seen: dict[int, list[tuple[str, ShardInfo]]] = {}
    for path, info in infos:
        assert info.index is not None
        given = seen.setdefault(info.index, [])
        for other_path, other in given:
            if other.part is not None and info.part is not None and other.part != info.part:
                continue  # two xdist workers' parts of one shard
            mixed = (other.part is None) != (info.part is None)
            raise InputError(
                f"merge: shard {info.label} given twice: {other_path} and {path}"
                + (" (a whole shard and one xdist worker's part of it)" if mixed else "")
            )
        given.append((path, info))
    return sorted(infos, key=lambda pi: (pi[1].index or 0, pi[1].part or ""))


def _tree_hash(report: RunReport) -> str | None:
    git = report.env.get("git")
    return git.get("tree_hash") if isinstance(git, Mapping) else None


def _check_same_origin(shards: Sequence[tuple[str, RunReport]]) -> None:
    """Every shard ran the same code (git tree hash of the code under test) from the same plan
    (its nonce): a stale shard of another commit or another CI run is an input error naming the
    folder and what differed, never merged into a report it does not belong to."""
    first_path, first = shards[0]
    assert first.shard is not None
    for path, report in shards[1:]:
        assert report.shard is not None
        if report.shard.nonce != first.shard.nonce:
            raise InputError(
                f"merge: {path}: plan nonce {report.shard.nonce or 'none'} differs from "
                f"{first.shard.nonce or 'none'} of {first_path} (a shard of another plan or CI "
                "run; merge the shards of one run)"
            )
        tree, want = _tree_hash(report), _tree_hash(first)
        if tree != want:
            raise InputError(
                f"merge: {path}: git tree {tree or 'unknown'} of the code under test differs "
                f"from {want or 'unknown'} of {first_path} (a shard of another commit; re-run "
                "it on this one)"
            )


def _shard_cases(
    path: str,
    report: RunReport,
    info: ShardInfo,
    owner: dict[str, str],
    by_name: dict[int, dict[str, PlannedCase]],
) -> dict[str, CaseResult]:
    """The report's results by case name, each checked against the plan and the others
    (``by_name``: each plan's cases by name, built once per plan object)."""
    planned = by_name.get(id(info.plan))
    if planned is None:
        planned = by_name[id(info.plan)] = {p.name: p for p in info.plan}
    out: dict[str, CaseResult] = {}
    for case in report.cases:
        p = planned.get(case.name)
        if p is None:
            raise InputError(
                f"{path}: shard {info.label} has a result for {case.name}, which is not in the "
                f"plan {info.digest}"
            )
        if case.name in owner or case.name in out:
            other = owner.get(case.name, path)
            raise InputError(
                f"merge: {case.name} is reported twice, by {other} and {path}; overlapping "
                "shards cannot be merged"
            )
        if p.shard != info.index:
            raise InputError(
                f"{path}: shard {info.label} has a result for {case.name}, which the plan puts "
                f"on shard {p.shard}/{info.count}"
            )
        out[case.name] = case
    return out


def _missing(p: PlannedCase, reason: str, cause: MissingCause) -> MissingCase:
    return MissingCase(p.id, p.kind, p.platform, reason, cause, p.shard, p.source)


def merge_reports(
    shards: Sequence[tuple[str, RunReport]],
    *,
    run_id: str = "merged",
    argv: Sequence[str] = (),
) -> RunReport:
    """One run report from shard reports (``(path, report)`` pairs; the path names the shard
    in messages). Raises :class:`InputError` naming the folders when they do not fit together."""
    infos = _check_consistent(shards)
    reports = {path: report for path, report in shards}
    first = infos[0][1]
    owner: dict[str, str] = {}
    results: dict[str, CaseResult] = {}
    missing_of: dict[str, MissingCase] = {}
    present: dict[int, list[tuple[str, RunReport]]] = {}  # shard -> its report, or its parts
    by_name: dict[int, dict[str, PlannedCase]] = {}
    for path, info in infos:
        report = reports[path]
        assert info.index is not None
        present.setdefault(info.index, []).append((path, report))
        reported = _shard_cases(path, report, info, owner, by_name)
        owner.update(dict.fromkeys(reported, path))
        results.update(reported)
        for m in report.missing:
            missing_of.setdefault(m.name, m)

    found = ", ".join(f"{i}/{first.count}" for i in sorted(present))
    cases: list[CaseResult] = []
    missing: list[MissingCase] = []
    for p in first.plan:
        if p.name in results:
            cases.append(results[p.name])
        elif p.shard not in present:
            missing.append(
                _missing(
                    p,
                    f"shard {p.shard}/{first.count} report not found (merged: {found})",
                    "shard_absent",
                )
            )
        elif p.name in missing_of:
            missing.append(missing_of[p.name])
        else:
            parts = present[p.shard]
            why = " (that shard was interrupted)" if any(r.interrupted for _, r in parts) else ""
            where = (
                f"report ({parts[0][0]}) has"
                if len(parts) == 1
                else f"reports ({', '.join(path for path, _ in parts)}) have"
            )
            reason = f"shard {p.shard}/{first.count} {where} no result for it{why}"
            missing.append(_missing(p, reason, "not_reported"))

    ordered = [pr for i in sorted(present) for pr in present[i]]
    runners = sorted({r.runner for _, r in ordered})
    budgets = [r.budget_s for _, r in ordered if r.budget_s is not None]
    load_errors = list(dict.fromkeys(e for _, r in ordered for e in r.load_errors))
    return RunReport(
        run_id=run_id,
        started_at=min(r.started_at for _, r in ordered),
        finished_at=max(r.finished_at for _, r in ordered),
        argv=tuple(argv),
        runner="+".join(runners),
        env=ordered[0][1].env,  # the lowest shard's; each shard's own is in its folder
        cases=tuple(cases),
        interrupted=any(r.interrupted for _, r in ordered),
        budget_s=sum(budgets) if budgets else None,
        load_errors=tuple(LoadError(e.path, e.message) for e in load_errors),
        infra_errors=tuple(
            f"shard {r.shard.label if r.shard else '?'} ({path}): {e}"
            for path, r in ordered
            for e in r.infra_errors
        ),
        shard=ShardInfo(None, first.count, first.digest, first.by, first.plan, nonce=first.nonce),
        missing=tuple(missing),
        merged_from=tuple(
            MergedShard(index, r.run_id, path, r.runner, r.interrupted)
            for index, parts in sorted(present.items())
            for path, r in parts
        ),
    )


def copy_outputs(run_dirs: Sequence[Path], out: Path) -> int:
    """Copy each shard folder's ``outputs/`` into ``out/outputs/`` (the paths in the reports
    are relative to the run folder, and each case's folder is its own, so they stay valid).
    Returns the number of files copied."""
    copied = 0
    for run_dir in run_dirs:
        src = run_dir / "outputs"
        if not src.is_dir():
            continue
        for f in sorted(p for p in src.rglob("*") if p.is_file()):
            dst = out / "outputs" / f.relative_to(src)
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, dst)
            copied += 1
    return copied


def write_merged(
    shards: Sequence[tuple[Path, RunReport]],
    out: Path,
    *,
    run_id: str,
    argv: Sequence[str] = (),
    latest: bool = False,
    references: Path | None = None,
) -> tuple[RunReport, int]:
    """Merge the shard reports (each with its run folder) into the new run folder ``out``: the
    shards' outputs copied in and every rendering written (``latest`` pointed at it if asked).
    Returns the merged report and the number of output files copied. Raises
    :class:`InputError` as :func:`merge_reports` does, before anything is written."""
    from harness.report.io import write_run

    merged = merge_reports([(str(d), r) for d, r in shards], run_id=run_id, argv=argv)
    out.mkdir(parents=True, exist_ok=True)
    copied = copy_outputs([d for d, _ in shards], out)
    write_run(merged, out, latest=latest, references=references)
    return merged, copied
