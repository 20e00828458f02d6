"""Comparing two saved run folders (``harness compare BASE_DIR HEAD_DIR``).

The runs are over, so there is no interleaving and no confirmation batch: latency uses every
measured repeat of each side, and a regression found here is not confirmed. Their environment
fingerprints (less the code under test) must match; otherwise every case is
``not_comparable`` and ``env_differences`` names the fields that differ, unless
``--allow-different-env`` (two CI artifacts from two runners). Either way ``env_diff`` holds
every difference (Python, packages, FFmpeg, driver, runner image, CPU flags) and each case its
drift: input hashes, first divergence and those differences side by side
(:mod:`harness.compare.drift`).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from harness.compare.drift import with_drift
from harness.compare.envdiff import env_diff, env_differences
from harness.compare.judge import judge_case
from harness.compare.latency import decide_stages
from harness.compare.provenance import check as check_provenance
from harness.compare.provenance import origin_from_env
from harness.compare.request import CompareRequest, latency_settings, read_calibration
from harness.compare.run import side_code_files, utc_now, write_comparison
from harness.compare.sides import incomplete, load_errors
from harness.compare.triage import apply_triage, saved_changes
from harness.execution.run import check_run_id, new_run_id
from harness.model import Comparison, RunReport, Side, SideInfo
from harness.report.io import read_report
from harness.worker.envinfo import env_digest


def compare_reports(
    base_dir: Path,
    head_dir: Path,
    *,
    request: CompareRequest,
    allow_different_env: bool = False,
) -> Comparison:
    """Judge two saved run folders (``harness run`` outputs) against each other.

    Their environment fingerprints (less the code under test) must match; otherwise every case
    is ``not_comparable`` and ``env_differences`` names the fields, unless
    ``allow_different_env``. Latency uses every measured repeat (no confirmation batch: the
    runs are over), so a regression found here is not confirmed.
    """
    started = utc_now()
    reports: dict[Side, RunReport] = {"base": read_report(base_dir), "head": read_report(head_dir)}
    roots = {
        "base": base_dir if base_dir.is_dir() else base_dir.parent,
        "head": head_dir if head_dir.is_dir() else head_dir.parent,
    }
    differences = env_differences(reports["base"].env, reports["head"].env)
    diff = env_diff(reports["base"].env, reports["head"].env)
    comparable = not differences or allow_different_env
    comparison_id = check_run_id(request.comparison_id) if request.comparison_id else new_run_id()
    out_dir = request.out_root / comparison_id
    # saved runs have no checkouts: the noise folder is read as given, for head's runner class
    runner = reports["head"].runner or "cpu"
    calibration = read_calibration(
        replace(request, profile=replace(request.profile, name=runner)), request.noise_dir
    ).against(env_digest(reports["base"].env))
    # one batch, no confirmation: the family is held at alpha itself
    latency = replace(latency_settings(request, calibration), confirm=False)
    # each side's target must come from its own checkout (or, when the environments differ
    # and that is allowed, its own environment): harness.compare.provenance
    origins = {
        side: origin_from_env(rep.env, own_env=bool(differences)) for side, rep in reports.items()
    }
    head_cases = {(c.id, c.platform): c for c in reports["head"].cases}
    base_cases = {(c.id, c.platform): c for c in reports["base"].cases}
    cases = []
    for key in [*base_cases, *(k for k in head_cases if k not in base_cases)]:
        b, h = base_cases.get(key), head_cases.get(key)
        stages = (
            decide_stages(
                b.attempts, h.attempts, latency, case=h.name, contention_free=h.platform == "cpu"
            )
            if b is not None and h is not None
            else []
        )
        c = judge_case(
            b,
            h,
            case=None,
            latency=stages,
            base_root=roots["base"],
            head_root=roots["head"],
            profile_margins=request.quality_margins,
            references=request.references_root,
            alpha=latency.alpha,
            rounds=len(h.attempts) if h else 0,
            provenance=check_provenance(b, h, origins),
        )
        if not comparable:
            c = replace(
                c,
                verdict="not_comparable",
                reason=f"environments differ in {', '.join(differences)}; "
                "rerun both on one runner or pass --allow-different-env",
            )
        elif b is None or h is None:
            c = replace(
                c,
                verdict="missing",
                reason=f"only in {'head' if b is None else 'base'}'s run: "
                f"{'base' if b is None else 'head'} has no result for it",
            )
        cases.append(c)
    # diff-aware triage where the runs recorded coverage (harness run --coverage)
    changes = saved_changes(reports, request.repo)
    cases = apply_triage(cases, reports, changes)
    comparison = Comparison(
        id=comparison_id,
        base=SideInfo(
            None,
            reports["base"].run_id,
            env_digest(reports["base"].env),
            report=str(base_dir.resolve()),
            code_files=side_code_files(reports["base"]),
        ),
        head=SideInfo(
            None,
            reports["head"].run_id,
            env_digest(reports["head"].env),
            report=str(head_dir.resolve()),
            code_files=side_code_files(reports["head"]),
        ),
        same_runner=not differences,
        # environments that differ: each case's drift (inputs, first divergence, differences)
        cases=with_drift(cases, reports, diff),
        runner=reports["head"].runner,
        rounds=0,
        started_at=started,
        finished_at=utc_now(),
        argv=request.argv,
        env_differences=tuple(differences),
        allowed_different_env=allow_different_env,
        noise_source=calibration.source if calibration.figures else None,
        calibration=calibration.to_json(),
        settings={"delta": latency.delta, "alpha": latency.alpha},
        env_diff=diff,
        infra_errors=incomplete(reports),
        load_errors=load_errors(reports),
        diff=changes.to_json() if changes is not None else None,
    )
    write_comparison(comparison, out_dir, references=request.references_root)
    return comparison
