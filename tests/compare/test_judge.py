"""The verdict engine on hand-built attempts: failure matrix, first divergence, quality
verdicts (on real output files), confirmation of latency regressions, saved-run comparison."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.stats

from harness.compare.divergence import first_divergence, is_input_like
from harness.compare.failures import failure_matrix
from harness.compare.latency import LatencySettings, case_verdict, confirm, decide_stages
from harness.compare.quality import quality_findings
from harness.compare.run import CompareRequest
from harness.compare.saved import compare_reports
from harness.compare.stats import head_fails_more_p
from harness.fsio import write_array
from harness.model import (
    Attempt,
    Case,
    CaseResult,
    CheckResult,
    CheckSpec,
    ErrorInfo,
    RunReport,
    StageLatency,
)
from harness.report.schema import validate_comparison


def att(
    status: str = "passed",
    *,
    rnd: int = 0,
    side: str = "head",
    error: str | None = None,
    fingerprints: dict[str, dict[str, Any]] | None = None,
    inputs: dict[str, str] | None = None,
    stages: dict[str, float] | None = None,
    checks: tuple[CheckResult, ...] = (),
    outputs: dict[str, dict[str, Any]] | None = None,
    warmup: bool = False,
) -> Attempt:
    return Attempt(
        "c",
        "cpu",
        rnd,
        status,  # type: ignore[arg-type]
        1,
        warmup=warmup,
        repeat=rnd,
        round=rnd,
        side=side,  # type: ignore[arg-type]
        inputs=inputs or {},
        fingerprints=fingerprints or {},
        stages=stages or {},
        checks=checks,
        outputs=outputs or {},
        duration_s=sum((stages or {}).values()),
        error=ErrorInfo.make(error, f"{error} went wrong") if error else None,
    )


def result(*attempts: Attempt, status: str = "passed", side: str = "head") -> CaseResult:
    return CaseResult(
        "c",
        "pipeline",
        "cpu",
        status,
        attempts=attempts,
        side=side,  # type: ignore[arg-type]
    )


# --- failure matrix -------------------------------------------------------------------------


def runs(pattern: str, error: str = "ValueError", side: str = "head") -> CaseResult:
    atts = [
        att("passed" if ch == "p" else "failed", rnd=i, error=None if ch == "p" else error)
        for i, ch in enumerate(pattern)
    ]
    return result(*atts, status="passed" if "f" not in pattern else "failed", side=side)


@pytest.mark.parametrize(
    ("base", "head", "verdict"),
    [
        ("ppp", "ppp", "no_change"),
        ("ppp", "fff", "new_failure"),
        ("fff", "ppp", "fixed"),
        ("fff", "fff", "pre_existing_failure"),
        ("ppp", "pfp", "new_failure"),  # a head-only failure, however intermittent
        ("pfp", "ppp", "flaky"),  # base only, intermittent: not head's doing
        ("pfp", "ppf", "flaky"),  # both sides show it
        ("ppppppp", "ffffffp", "new_failure"),  # head-only, fails most runs
        ("pfpppp", "ffffpf", "new_failure"),  # both show it, head significantly more often
    ],
)
def test_failure_matrix_verdicts(base: str, head: str, verdict: str) -> None:
    fm = failure_matrix(runs(base, side="base"), runs(head))
    assert fm.verdict == verdict, fm
    assert fm.base_failed == base.count("f") and fm.head_failed == head.count("f")


def test_flaky_carries_fisher_p_and_escalation_says_why() -> None:
    mild = failure_matrix(runs("pfp", side="base"), runs("ppf"))
    assert mild.verdict == "flaky"
    assert mild.p_head_worse is not None and mild.p_head_worse > 0.05
    bad = failure_matrix(runs("pfpppp", side="base"), runs("ffffpf"))
    assert bad.p_head_worse is not None and bad.p_head_worse <= 0.05
    assert "significantly" in (bad.reason or "")


def test_both_failing_with_a_different_signature_is_a_new_failure() -> None:
    fm = failure_matrix(runs("fff", "ValueError", "base"), runs("fff", "KeyError"))
    assert fm.verdict == "new_failure"
    assert fm.base_signatures != fm.head_signatures


def test_warmups_and_retried_attempts_count_for_signatures_not_for_counts() -> None:
    """Counts are of finals; failures in a warm-up or a replaced try are still head's."""
    head = result(
        att("failed", warmup=True, error="X"),
        att("failed", rnd=0, error="OSError"),
        att("passed", rnd=0),  # the retry of round 0 replaced the failed try
        att("passed", rnd=1),
    )
    fm = failure_matrix(runs("pp", side="base"), head)
    assert (fm.verdict, fm.head_passed, fm.head_failed) == ("new_failure", 2, 0)
    assert set(fm.head_only) == set(fm.head_signatures) and len(fm.head_only) == 2


def test_a_side_without_measured_runs_is_missing() -> None:
    assert failure_matrix(runs("pp", side="base"), result()).verdict == "missing"


# --- first divergence -----------------------------------------------------------------------


def fp(h: str, *, nonfinite: int = 0, lo: float = 0.0, hi: float = 1.0) -> dict[str, Any]:
    return {
        "hash": h,
        "dtype": "float32",
        "shape": [2],
        "nonfinite": nonfinite,
        "min": lo,
        "max": hi,
        "mean": (lo + hi) / 2,
    }


BASE_FPS = {
    "text.context": fp("t"),
    "latents.video.init": fp("n"),
    "denoise.step00": fp("d0"),
    "denoise.step01": fp("d1"),
    "audio.pcm": fp("a"),
}


def test_identical_records_do_not_diverge() -> None:
    b = att(inputs={"ckpt": "x"}, fingerprints=BASE_FPS)
    assert first_divergence(b, b).kind == "none"


def test_a_different_decoded_input_is_found_first() -> None:
    b = att(inputs={"ckpt": "x"}, fingerprints=BASE_FPS)
    h = att(inputs={"ckpt": "y"}, fingerprints={**BASE_FPS, "denoise.step00": fp("zz")})
    d = first_divergence(b, h)
    assert (d.kind, d.first) == ("inputs", "ckpt")


def test_different_initial_noise_is_an_input_divergence() -> None:
    b = att(fingerprints=BASE_FPS)
    h = att(fingerprints={**BASE_FPS, "latents.video.init": fp("m"), "denoise.step00": fp("z")})
    d = first_divergence(b, h)
    assert (d.kind, d.first) == ("inputs", "latents.video.init")


def test_stage_divergence_names_the_first_fingerprint_its_step_and_deltas() -> None:
    b = att(fingerprints=BASE_FPS)
    h = att(
        fingerprints={
            **BASE_FPS,
            "denoise.step01": fp("q", lo=-0.25, hi=1.5),
            "audio.pcm": fp("b", nonfinite=3),
        }
    )
    d = first_divergence(b, h)
    assert (d.kind, d.first) == ("stage", "denoise.step01")
    assert d.detail["step"] == 1
    assert d.detail["min_delta"] == -0.25 and d.detail["max_delta"] == 0.5
    assert d.detail["max_abs_diff_at_least"] == 0.5
    assert d.detail["first_nonfinite"] == "audio.pcm"


def test_nonfinite_first_difference_names_the_side() -> None:
    b = att(fingerprints=BASE_FPS)
    h = att(fingerprints={**BASE_FPS, "audio.pcm": fp("b", nonfinite=1)})
    d = first_divergence(b, h)
    assert (d.kind, d.first, d.detail["side"]) == ("nonfinite", "audio.pcm", "head")
    d = first_divergence(h, b)
    assert d.detail["side"] == "base"


def test_denoise_is_not_mistaken_for_noise() -> None:
    assert not is_input_like("denoise.step00")
    assert is_input_like("latents.audio.init") and is_input_like("latents.noise")


# --- quality --------------------------------------------------------------------------------


def video_output(tmp: Path, name: str, frames: np.ndarray) -> dict[str, Any]:
    path = tmp / f"{name}.safetensors"
    write_array(path, frames)
    return {
        "video": {"kind": "video", "hash": f"h-{frames.tobytes().__hash__()}", "path": path.name}
    }


def psnr_check(value: float) -> CheckResult:
    return CheckResult("psnr(video)", "psnr", value, ">=", 35.0, "fail", True, output="video")


def quality_pair(
    tmp: Path,
    base_vals: list[float],
    head_vals: list[float],
    *,
    head_noise: int = 3,
    case: Case | None = None,
    profile: dict[str, float] | None = None,
) -> Any:
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 255, (3, 16, 16, 3), dtype=np.uint8)
    other = np.clip(frames.astype(int) + head_noise, 0, 255).astype(np.uint8)
    base_out = video_output(tmp, "b", frames)
    head_out = video_output(tmp, "h", other if head_noise else frames)
    b = [att(rnd=i, checks=(psnr_check(v),), outputs=base_out) for i, v in enumerate(base_vals)]
    h = [att(rnd=i, checks=(psnr_check(v),), outputs=head_out) for i, v in enumerate(head_vals)]
    if len(set(base_vals)) > 1:  # base varies: its outputs differ between repeats
        b = [
            att(
                rnd=i,
                checks=(psnr_check(v),),
                outputs={"video": {**base_out["video"], "hash": f"b{i}"}},
            )
            for i, v in enumerate(base_vals)
        ]
    (f,) = quality_findings(case, b, h, base_root=tmp, head_root=tmp, profile_margins=profile)
    return f


def test_bit_identical_outputs_are_no_change(tmp_path: Path) -> None:
    f = quality_pair(tmp_path, [89.0] * 3, [89.0] * 3, head_noise=0)
    assert (f.verdict, f.identical) == ("no_change", True)


def test_outputs_that_differ_within_the_margin_are_changed_with_their_size(tmp_path: Path) -> None:
    f = quality_pair(tmp_path, [89.0] * 3, [88.5] * 3)
    assert f.verdict == "changed" and f.identical is False
    assert f.head_vs_base is not None and 30 < f.head_vs_base < 45  # +3 levels: ~38.6 dB
    assert (f.margin, f.margin_source) == (1.0, "default")


def test_worse_than_base_by_more_than_the_margin_is_a_regression(tmp_path: Path) -> None:
    f = quality_pair(tmp_path, [89.0] * 3, [62.0] * 3)
    assert f.verdict == "regression" and f.base_vs_ref == 89.0 and f.head_vs_ref == 62.0
    assert quality_pair(tmp_path, [62.0] * 3, [89.0] * 3).verdict == "improvement"


def test_margin_overrides_profile_then_case_setting(tmp_path: Path) -> None:
    f = quality_pair(tmp_path, [89.0] * 3, [87.0] * 3, profile={"psnr": 5.0})
    assert (f.verdict, f.margin, f.margin_source) == ("changed", 5.0, "profile")
    case = Case(
        "c",
        "pipeline",
        "x.toml",
        checks=(CheckSpec("psnr", ">=", 35.0, output="video", settings={"compare_margin": 0.5}),),
    )
    f = quality_pair(tmp_path, [89.0] * 3, [88.0] * 3, case=case, profile={"psnr": 5.0})
    assert (f.verdict, f.margin, f.margin_source) == ("regression", 0.5, "case")


def test_base_spread_widens_the_margin(tmp_path: Path) -> None:
    f = quality_pair(tmp_path, [86.0, 89.0, 88.0], [86.5] * 3)
    assert f.base_spread == 3.0 and f.margin == 4.0 and f.verdict == "changed"


# --- latency --------------------------------------------------------------------------------


def timed(side: str, secs: list[float], stage: str = "S") -> list[Attempt]:
    return [att(rnd=i, side=side, stages={stage: s}) for i, s in enumerate(secs)]


def test_stage_regression_needs_full_separation_at_three_rounds() -> None:
    s = LatencySettings()
    (st, _total) = decide_stages(
        timed("base", [1.0, 1.01, 0.99]), timed("head", [1.2, 1.21, 1.19]), s, case="c"
    )
    assert st.verdict == "regression" and st.n_base == 3 and st.ratio == pytest.approx(1.2, 0.01)
    (st, _total) = decide_stages(
        timed("base", [1.0, 1.3, 0.99]), timed("head", [1.2, 1.21, 1.19]), s, case="c"
    )
    assert st.verdict != "regression"


def test_failed_runs_and_tiny_stages_are_not_judged() -> None:
    base = [*timed("base", [1.0, 1.0, 1.0]), att("failed", rnd=3, side="base", stages={"S": 9.0})]
    (st, _total) = decide_stages(base, timed("head", [1.0, 1.0, 1.0]), LatencySettings(), case="c")
    assert st.n_base == 3
    (tiny, _t) = decide_stages(
        timed("base", [1e-5] * 3, "T"), timed("head", [3e-5] * 3, "T"), LatencySettings(), case="c"
    )
    assert tiny.judged is False and case_verdict([tiny]) == "missing"


def test_calibrated_noise_widens_the_margin() -> None:
    s = LatencySettings(noise={"c": {"S": 0.15}})
    (st, _t) = decide_stages(
        timed("base", [1.0, 1.01, 0.99]), timed("head", [1.2, 1.21, 1.19]), s, case="c"
    )
    # 2 x 0.15 would be 30 %: capped at 20 %
    assert st.margin == pytest.approx(0.2) and st.noise == 0.15 and st.verdict != "regression"


def test_an_unconfirmed_regression_is_suspect() -> None:
    found = StageLatency("S", "regression", ratio=1.2, reason="r")
    (same,) = confirm([found], [StageLatency("S", "regression")])
    assert (same.verdict, same.confirmation) == ("regression", "regression")
    (sus,) = confirm([found], [StageLatency("S", "no_change", reason="fresh")])
    assert sus.verdict == "suspect" and "not confirmed" in (sus.reason or "")
    (gone,) = confirm([found], None)
    assert gone.verdict == "suspect" and "no rounds were left" in (gone.reason or "")
    (aa,) = confirm([found], None, no_batch="an A/A run")
    assert aa.verdict == "suspect" and aa.reason == "r; not confirmed: an A/A run"
    assert case_verdict([sus, StageLatency("T", "inconclusive")]) == "suspect"


# --- saved runs -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def env() -> dict[str, Any]:
    """This machine's real environment record (what report.json's schema requires)."""
    from harness.worker.envinfo import collect_env

    return collect_env(None)


def saved(tmp: Path, name: str, env: dict[str, Any], secs: list[float]) -> Path:
    rep = RunReport(name, "t0", "t1", (), "cpu", env, (result(*timed("head", secs)),))
    (tmp / name).mkdir()
    (tmp / name / "report.json").write_text(json.dumps(rep.to_json()))
    return tmp / name


def test_saved_runs_from_different_environments_are_not_comparable(
    tmp_path: Path, env: dict[str, Any]
) -> None:
    a = saved(tmp_path, "a", env, [1.0, 1.0, 1.0])
    b = saved(
        tmp_path,
        "b",
        {
            **env,
            "numpy": "2.0",
            "hostname": "other",
            "git": {"sha": "b", "dirty": False, "tree_hash": "t"},
        },
        [1.0, 1.0, 1.0],
    )
    req = CompareRequest(out_root=tmp_path / "out", comparison_id="x", noise_dir=None)
    cmp = compare_reports(a, b, request=req)
    assert cmp.env_differences == ("hostname", "numpy")  # git (the code under test) is not
    assert [c.verdict for c in cmp.cases] == ["not_comparable"]
    assert "hostname, numpy" in (cmp.cases[0].reason or "")
    assert cmp.exit_code() == 3  # a comparison that did not compare is incomplete, never 1
    validate_comparison(json.loads((tmp_path / "out" / "x" / "comparison.json").read_text()))
    allowed = compare_reports(
        a,
        b,
        request=CompareRequest(out_root=tmp_path / "out", comparison_id="y", noise_dir=None),
        allow_different_env=True,
    )
    assert allowed.cases[0].verdict != "not_comparable" and allowed.same_runner is False


def test_saved_runs_on_one_environment_are_judged(tmp_path: Path, env: dict[str, Any]) -> None:
    # 5 runs a side: a family of stages held at alpha together needs more than 3
    a = saved(tmp_path, "a", env, [1.0, 1.01, 0.99, 1.005, 0.995])
    b = saved(
        tmp_path,
        "b",
        {**env, "git": {"sha": "b", "dirty": False, "tree_hash": "t"}},
        [1.3, 1.31, 1.29, 1.305, 1.295],
    )
    cmp = compare_reports(
        a, b, request=CompareRequest(out_root=tmp_path / "out", comparison_id="x", noise_dir=None)
    )
    assert cmp.same_runner and cmp.cases[0].verdict == "regression"
    assert cmp.calibration is not None and cmp.calibration["status"] == "uncalibrated"
    assert (tmp_path / "out" / "x" / "summary.md").is_file()


def test_noise_pairs_the_runs_of_each_round_and_leaves_failed_rounds_out(tmp_path: Path) -> None:
    from harness.compare.noise import calibrate, load_noise, store_noise

    first = timed("base", [1.0, 1.1, 1.2, 5.0])
    second = [*timed("head", [1.0, 1.1, 1.2]), att("failed", rnd=3, stages={"S": 1.0})]
    figures = calibrate({"c": (first, second)})
    assert figures["c"]["S"]["n"] == 3  # round 3 failed on one side: not a pair
    assert figures["c"]["S"]["noise"] == 0.0  # each round's two runs agree exactly
    path = tmp_path / "noise" / "cpu.json"
    store_noise(path, "cpu", "abc", figures, env_digest="e")
    store_noise(path, "cpu", "abc", {"d": {"S": {"noise": 0.1}}}, env_digest="e")  # merged
    got = load_noise(path, runner="cpu").figures
    assert got == {"c": {"S": 0.0, "total": 0.0}, "d": {"S": 0.1}}
    store_noise(path, "cpu", "abc", {"d": {"S": {"noise": 0.1}}}, env_digest="other")
    assert load_noise(path, runner="cpu").figures == {"d": {"S": 0.1}}  # another environment


# --- failure matrix -------------------------------------------------------------------------------


def test_fisher_by_hand_and_against_the_hypergeometric() -> None:
    # 3 of 6 attempts failed, all on head: 1 of the C(6, 3) ways.
    assert head_fails_more_p(3, 0, 0, 3) == pytest.approx(0.05)
    assert head_fails_more_p(0, 3, 3, 0) == pytest.approx(1.0)
    bp, bf, hp, hf = 18, 2, 11, 9
    ref = scipy.stats.hypergeom.sf(hf - 1, bp + bf + hp + hf, bf + hf, hp + hf)
    assert head_fails_more_p(bp, bf, hp, hf) == pytest.approx(float(ref), rel=1e-9)
    assert head_fails_more_p(5, 1, 5, 1) > 0.5


def test_fisher_rejects_bad_counts() -> None:
    with pytest.raises(ValueError, match="head_failed: expected a non-negative int"):
        head_fails_more_p(1, 0, 1, -1)
    with pytest.raises(ValueError, match="base_passed"):
        head_fails_more_p(1.5, 0, 1, 1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at least one attempt"):
        head_fails_more_p(0, 0, 1, 1)
