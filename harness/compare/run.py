"""The comparison engine's public entry points.

- :func:`compare_revisions`: check base and head out as git worktrees, run the selected cases
  for both interleaved on this runner (sequential looks, confirmation), judge every case, and
  write ``<out>/<id>/comparison.json`` (+ ``summary.md``) beside ``base/`` and ``head/``
  (each a normal run folder with ``report.json``).
- :func:`harness.compare.saved.compare_reports`: the same judgement over two saved runs.

Example::

    comparison = compare_revisions("main", "HEAD", request=CompareRequest(keyword="t2va-int8"))
    comparison.exit_code()   # 1 on a regression or new failure
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness.cases import PlanItem, build_plan, load_suite
from harness.compare.diff import ChangeSet, changed_lines
from harness.compare.drift import with_drift
from harness.compare.envdiff import env_diff, env_differences
from harness.compare.judge import judge_case
from harness.compare.latency import confirm, decide_stages
from harness.compare.noise import (
    NoiseFile,
    calibrate,
    noise_dir_for,
    noise_path,
    store_noise,
    uncalibrated,
)
from harness.compare.provenance import check as check_provenance
from harness.compare.provenance import live_origin
from harness.compare.request import (
    CompareRequest,
    Say,
    latency_settings,
    read_calibration,
    runs_per_round,
)
from harness.compare.session import Session
from harness.compare.sides import incomplete, load_errors, side_spec
from harness.compare.triage import apply_triage
from harness.compare.worktree import Checkouts, resolve
from harness.errors import UsageError
from harness.execution.paired import PairedRunner
from harness.execution.run import RunOptions, check_run_id, new_run_id
from harness.execution.workers import SideSpec
from harness.fsio import write_json_atomic
from harness.model import (
    Attempt,
    CaseComparison,
    CaseResult,
    Comparison,
    LoadError,
    RunReport,
    Side,
    SideInfo,
)
from harness.model.provenance import code_files
from harness.report.comparison_io import render_comparison
from harness.report.io import write_run
from harness.worker.envinfo import env_digest


def utc_now() -> str:
    return dt.datetime.now(dt.UTC).isoformat()


def side_code_files(report: RunReport) -> dict[str, str]:
    out: dict[str, str] = {}
    for c in report.cases:
        for a in c.attempts:
            for f in code_files(a.notes).values():
                out.setdefault(c.id, f)
    return out


def _relocate(report: RunReport, prefix: str) -> RunReport:
    """Output paths relative to the side's folder (they were relative to the comparison's)."""

    def fix(a: Attempt) -> Attempt:
        outputs = {
            k: {**v, "path": f"{prefix}/{v['path']}"} if v.get("path") else dict(v)
            for k, v in a.outputs.items()
        }
        return replace(a, outputs=outputs)

    cases = tuple(replace(c, attempts=tuple(fix(a) for a in c.attempts)) for c in report.cases)
    return replace(report, cases=cases)


def _items(request: CompareRequest, cases_root: Path | None) -> tuple[list[PlanItem], list[Any]]:
    paths = list(request.case_paths) or [Path("cases")]
    if cases_root is not None:
        paths = [p if p.is_absolute() else cases_root / p for p in paths]
    suite = load_suite(paths)
    platforms = list(request.platforms) or [request.profile.platform]
    items = build_plan(suite.cases, platforms, request.keyword)
    if request.case_ids:
        wanted = set(request.case_ids)
        items = [i for i in items if i.case.id in wanted or i.name in wanted]
    return items, list(suite.errors)


def finish_comparison(
    comparison_id: str,
    live: Live,
    request: CompareRequest,
    revs: Mapping[Side, str | None],
    *,
    started_at: str,
    same_runner: bool,
    differences: Sequence[str] = (),
    allowed: bool = False,
    envs: Mapping[Side, str] | None = None,
    changes: ChangeSet | None = None,
) -> Comparison:
    """The comparison of what ``live`` ran, written (with its renderings) to its folder;
    with ``changes`` (git diff base..head), each case not ``no_change`` is triaged against it
    and the red cases are ordered by what it found (:mod:`harness.compare.triage`)."""
    reports, out_dir = live.reports, live.run_dir
    sides = {}
    for side, rep in reports.items():
        py = rep.env.get("python")
        sides[side] = SideInfo(
            rev=revs.get(side),
            run_id=rep.run_id,
            env_digest=env_digest(rep.env),
            sha=(rep.env.get("git") or {}).get("sha") if isinstance(rep.env, Mapping) else None,
            report=f"{side}/report.json",
            code_files=side_code_files(rep),
            env=(envs or {}).get(side),
            python=py.get("executable") if isinstance(py, Mapping) else None,
        )
    lat = request.latency
    diff = env_diff(reports["base"].env, reports["head"].env)
    comparison = Comparison(
        id=comparison_id,
        base=sides["base"],
        head=sides["head"],
        same_runner=same_runner,
        cases=with_drift(tuple(apply_triage(live.cases, reports, changes)), reports, diff),
        runner=request.profile.name,
        rounds=live.rounds,
        started_at=started_at,
        finished_at=utc_now(),
        argv=request.argv,
        env_differences=tuple(differences),
        allowed_different_env=allowed,
        noise_source=live.noise_source,
        calibration=live.calibration.against(sides["base"].env_digest).to_json(),
        settings={
            "delta": lat.delta,
            "alpha": lat.alpha,
            "batch_alpha": lat.batch_alpha,
            "max_margin": lat.max_margin,
            "noise_max_age_days": request.noise_max_age_days,
            "looks": list(lat.looks),
            "confirm": lat.confirm,
            "min_stage_s": lat.min_stage_s,
            "quality_margins": dict(request.quality_margins),
            "budget_s": request.budget_s,
            "workers": "per round" if request.worker_per_round else "one per side",
            "runs_per_round": runs_per_round(request),
        },
        infra_errors=incomplete(reports),
        env_diff=diff,
        load_errors=load_errors(reports),
        diff=changes.to_json() if changes is not None else None,
    )
    write_comparison(comparison, out_dir, references=request.references_root)
    return comparison


def write_comparison(
    comparison: Comparison, out_dir: Path, *, references: Path | None = None
) -> None:
    """``comparison.json`` and its renderings (``summary.md``, ``index.html`` with the frames
    of ``references`` beside base's and head's)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out_dir / "comparison.json", comparison.to_json())
    render_comparison(comparison, out_dir, references=references)


@dataclass(frozen=True)
class Live:
    """What the interleaved rounds of a live comparison produced, judged per case."""

    run_dir: Path
    items: Sequence[PlanItem]
    reports: Mapping[Side, RunReport]
    cases: Sequence[CaseComparison]
    rounds: int
    noise_source: str | None
    calibration: NoiseFile


def run_live(
    request: CompareRequest,
    comparison_id: str,
    sides: Mapping[Side, SideSpec],
    *,
    cases_root: Path | None,
    what: str,
    aa: bool = False,
    noise_dir: Path | None = None,
    own_envs: bool = False,
    coverage: bool = False,
) -> Live:
    """Run the selected cases for both ``sides`` interleaved on this runner and judge them.

    The shared engine of :func:`compare_revisions` and
    :func:`harness.compare.envs.compare_environments`: sequential looks and confirmation
    batches (or, with ``aa``, a fixed number of rounds whose detections are runner noise),
    one run folder per side, one verdict per case. ``what`` names the two sides in progress.
    With ``aa`` the calibrated noise is stored in ``<noise_dir>/<runner>.json``; otherwise
    it is read from ``noise_dir`` (default: ``request.noise_dir``), which the caller has
    resolved away from head's tree (:func:`~harness.compare.noise.noise_dir_for`). Each side's
    target must come from its checkout (with ``own_envs``, or its own environment), else the
    case is ``not_comparable`` (:mod:`harness.compare.provenance`). With ``coverage`` (and
    ``request.coverage``), every case judged other than ``no_change`` then gets one coverage
    attempt per side, after the rounds, recorded in its side's report.
    """
    say = request.progress or (lambda _l: None)
    items, broken = _items(request, cases_root)
    if not items:
        if broken:
            files = "; ".join(str(e) for e in broken)
            raise UsageError(
                f"no case selected: {len(broken)} case file(s) failed to load: {files}"
            )
        raise UsageError("no case selected (check the paths and -k)")
    # One warm-up per side at least: a cold first run (lazy imports, allocator, caches)
    # would otherwise land on whichever side goes first in round 0.
    items = [
        replace(i, case=replace(i.case, warmup=max(i.case.warmup, request.warmup))) for i in items
    ]
    noise_file = noise_path(request.noise_dir, request.profile.name) if request.noise_dir else None
    calibration = (
        uncalibrated("an A/A run measures the noise; it uses none")
        if aa
        else read_calibration(request, noise_dir or request.noise_dir)
    )
    latency = latency_settings(request, calibration)
    runner = PairedRunner(
        RunOptions(
            profile=request.profile,
            out_root=request.out_root,
            run_id=comparison_id,
            references_root=str(request.references_root.resolve())
            if request.references_root is not None and request.references_root.is_dir()
            else None,
            argv=request.argv,
            cwd=str(Path.cwd()),
            progress=say,
            budget_s=request.budget_s,
        ),
        sides,
        worker_per_round=request.worker_per_round,
        runs_per_round=runs_per_round(request),
    )
    say(f"compare {comparison_id}: {what}, {len(items)} case(s) -> {runner.run_dir}")
    session = Session(runner, items, latency, budget_s=request.budget_s, say=say)
    # coverage attempts follow in the last round's (warm) workers: kept open for them
    keep = coverage and request.coverage
    finished = False
    try:
        if aa:
            runner.run_rounds(items, max(latency.looks))
        else:
            session.run()
        finished = True
    except KeyboardInterrupt:
        # what finished is judged and written; the comparison says it is incomplete
        runner.request_stop()
        runner.harness_errors.append("comparison interrupted: judged on the rounds that ran")
    finally:
        errors = tuple(LoadError(e.path, str(e)) for e in broken)
        sides_reports = runner.reports(items, errors, close=not (keep and finished))
        reports = {side: _relocate(rep, "..") for side, rep in sides_reports.items()}
        for side, rep in reports.items():
            (runner.run_dir / side).mkdir(parents=True, exist_ok=True)
            write_run(rep, runner.run_dir / side, latest=False, references=request.references_root)
    out_dir = runner.run_dir
    cases = []
    for item in items:
        b, h = _find(reports["base"], item), _find(reports["head"], item)
        origins = {
            side: live_origin(spec, item, reports[side].env if own_envs else None)
            for side, spec in sides.items()
        }
        if aa:
            # one revision against itself: a detection is the rule's false alarm at this
            # runner's noise, never a regression (DESIGN: unconfirmed is ``suspect``)
            stages = confirm(
                decide_stages(
                    b.attempts,
                    h.attempts,
                    latency,
                    case=item.name,
                    contention_free=item.platform == "cpu",
                ),
                None,
                no_batch="an A/A run compares one revision with itself, so this is runner noise",
            )
        elif item.name in session.states:
            stages = session.states[item.name].stages()
        else:
            stages = []
        cases.append(
            judge_case(
                b,
                h,
                case=item.case,
                latency=stages,
                base_root=out_dir / "base",
                head_root=out_dir / "head",
                profile_margins=request.quality_margins,
                references=request.references_root,
                alpha=latency.alpha,
                rounds=len({a.round for a in h.attempts if not a.warmup}),
                provenance=check_provenance(b, h, origins),
            )
        )
    if keep and finished and not runner.stop_requested:
        reports = _take_coverage(runner, items, cases, reports, errors, say)
    # the workers kept open for coverage attempts (a harness bug above ends the command, and
    # its workers die with it)
    runner.executor.close()
    if aa and noise_file is not None:
        figures = calibrate(
            {
                i.name: (_find(reports["base"], i).attempts, _find(reports["head"], i).attempts)
                for i in items
            },
            contention_free={i.name for i in items if i.platform == "cpu"},
        )
        store_noise(
            noise_file,
            request.profile.name,
            sides["base"].rev or "",
            figures,
            env_digest=env_digest(reports["base"].env),
        )
        say(f"noise for {len(figures)} case(s) -> {noise_file}")
    return Live(
        run_dir=out_dir,
        items=items,
        reports=reports,
        cases=cases,
        rounds=runner.next_round,
        noise_source=calibration.source if calibration.figures else None,
        calibration=calibration,
    )


def _take_coverage(
    runner: PairedRunner,
    items: Sequence[PlanItem],
    cases: Sequence[CaseComparison],
    reports: dict[Side, RunReport],
    errors: Sequence[LoadError],
    say: Say,
) -> dict[Side, RunReport]:
    """A coverage attempt per side of every case not judged ``no_change`` (nor skipped), after
    the timed rounds; the side reports are rewritten with what it recorded."""
    quiet = {"no_change", "skipped"}
    needs = [i for i, c in zip(items, cases, strict=True) if c.verdict not in quiet]
    if not needs:
        return reports
    say(f"coverage: {len(needs)} case(s) not no_change, one coverage attempt per side")
    runner.run_coverage(needs)
    fresh = {side: _relocate(rep, "..") for side, rep in runner.reports(items, errors).items()}
    for side, rep in fresh.items():
        write_json_atomic(runner.run_dir / side / "report.json", rep.to_json(), indent=None)
    return fresh


def compare_revisions(
    base: str, head: str, *, request: CompareRequest, aa: bool = False
) -> Comparison:
    """Run ``base`` and ``head`` of ``request.repo`` interleaved here and judge every case.

    With ``aa`` (``head == base``), also store per case and stage noise in
    ``<noise_dir>/<runner>.json``.
    """
    started = utc_now()
    comparison_id = check_run_id(request.comparison_id) if request.comparison_id else new_run_id()
    with Checkouts(request.repo) as co:
        shas = {"base": resolve(co.repo, base), "head": resolve(co.repo, head)}
        base_dir = co.add(shas["base"], "base")
        head_dir = base_dir if aa and shas["head"] == shas["base"] else co.add(shas["head"], "head")
        dirs: dict[Side, Path] = {"base": base_dir, "head": head_dir}
        python = request.python or os.environ.get("HARNESS_PYTHON") or _python()
        sides = {
            side: side_spec(
                side,
                d,
                request.code_roots,
                python=python,
                rev=shas[side],
                where=f"that revision of {co.repo}",
            )
            for side, d in dirs.items()
        }
        # never head's tree: a head could ship its own noise file and pick its own margins
        noise_dir = (
            noise_dir_for(request.noise_dir, repo=co.repo, base=base_dir, head=head_dir)
            if request.noise_dir is not None and not aa
            else None
        )
        live = run_live(
            request,
            comparison_id,
            sides,
            cases_root=head_dir if request.cases_from == "head" else None,
            what=f"base {shas['base'][:12]} vs head {shas['head'][:12]}",
            aa=aa,
            noise_dir=noise_dir,
            coverage=not aa,
        )
        changes = (
            changed_lines(co.repo, shas["base"], shas["head"])
            if not aa and request.coverage
            else None
        )
    differences = env_differences(live.reports["base"].env, live.reports["head"].env)
    return finish_comparison(
        comparison_id,
        live,
        request,
        {"base": base, "head": head},
        started_at=started,
        same_runner=not differences,
        differences=differences,
        changes=changes,
    )


def _find(report: RunReport, item: PlanItem) -> CaseResult:
    for c in report.cases:
        if c.id == item.case.id and c.platform == item.platform:
            return c
    raise AssertionError(f"{item.name}: not in report {report.run_id}")


def _python() -> str:
    import sys

    return sys.executable
