"""The latency rule of issue 18: the interval wholly above the margin, a case's stages held at
alpha together (Holm), alpha spent over the looks, a confirmation batch that re-judges every
stage, contention-free time on the CPU, and calibrated noise that is stamped, read from base,
reported stale or uncalibrated."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import cast

import numpy as np
import pytest
from simpaired import ITEM, SimulatedPairedRunner

from harness.compare.latency import LatencySettings, case_verdict, confirm, decide_stages
from harness.compare.noise import load_noise, noise_dir_for, store_noise
from harness.compare.session import Session
from harness.compare.stats import decide_latency, family_level, holm, spending
from harness.errors import UsageError
from harness.execution.paired import PairedRunner
from harness.model import Attempt, Side, StageLatency

JITTER = [1.0, 1.01, 0.99, 1.005, 0.995, 1.015, 0.985]


def runs(side: Side, rows: list[dict[str, float]], **extra: object) -> list[Attempt]:
    return [
        Attempt(
            "c",
            "cpu",
            i,
            "passed",
            0,
            side=side,
            round=i,
            stages=row,
            duration_s=sum(row.values()),
            **extra,  # type: ignore[arg-type]
        )
        for i, row in enumerate(rows)
    ]


# --- the interval, not the point estimate --------------------------------------------------------


def test_a_point_estimate_above_the_margin_is_not_a_regression() -> None:
    # +5.9 %, every head run slower than every base run (p = 1/252): the old rule called this a
    # regression; the one-sided 95 % bound is +4.0 %, not wholly above the 5 % margin.
    base, head = [1.00, 1.01, 0.99, 1.0, 1.02], [1.06, 1.07, 1.05, 1.08, 1.045]
    d = decide_latency(base, head)
    assert d.ratio > 1.05 and d.p_regression <= 0.05
    assert d.verdict == "inconclusive"


def test_an_interval_wholly_above_the_margin_is_a_regression() -> None:
    d = decide_latency([1.00, 1.01, 0.99, 1.0, 1.02], [1.20, 1.21, 1.19, 1.2, 1.22])
    assert d.verdict == "regression" and d.p_above_margin <= 0.05


# --- Holm across a case's stages -----------------------------------------------------------------


def family(slow: list[float]) -> tuple[list[Attempt], list[Attempt]]:
    """13 steady stages and S; head's S is ``slow``."""
    base = [
        {"S": JITTER[r], **{f"T{i:02d}": 0.5 * JITTER[(r + i) % 7] for i in range(13)}}
        for r in range(7)
    ]
    head = [{**row, "S": slow[r]} for r, row in enumerate(base)]
    return runs("base", base), runs("head", head)


def test_holm_holds_the_stages_of_a_case_at_alpha_together() -> None:
    # S alone would be a regression at alpha (p above the margin 0.0055 <= 0.05); in a family
    # of 15 (14 stages and total) Holm tests the smallest p at 0.05 / 15 and S is not one.
    slow = [1.12, 1.13, 1.11, 1.125, 1.115, 1.14, 1.04]
    alone = decide_latency(JITTER, slow)
    assert alone.verdict == "regression" and 0.0033 < alone.p_above_margin <= 0.05
    base, head = family(slow)
    settings = LatencySettings(confirm=False)  # one batch: the family at alpha itself
    stages = {s.stage: s for s in decide_stages(base, head, settings, case="c")}
    assert len(stages) == 15
    assert stages["S"].verdict != "regression"
    assert "Holm over 15 stage(s)" in (stages["S"].reason or "")
    # a clear one still is
    base, head = family([1.3 * j for j in JITTER])
    stages = {s.stage: s for s in decide_stages(base, head, settings, case="c")}
    assert stages["S"].verdict == "regression"


def test_holm_steps_down_and_weights() -> None:
    assert holm({"a": 0.001, "b": 0.02, "c": 0.5}, 0.05) == pytest.approx(
        {"a": 0.05 / 3, "b": 0.05 / 2}
    )
    assert holm({"a": 0.03, "b": 0.03}, 0.05) == {}
    # weights: "a" carries half the level in a family of 3
    assert set(holm({"a": 0.02, "b": 0.3, "c": 0.4}, 0.05, {"a": 2, "b": 1, "c": 1})) == {"a"}


# --- alpha spent over the looks ------------------------------------------------------------------


def test_alpha_is_spent_over_the_looks() -> None:
    shares = spending((3, 5, 7), 0.05)
    assert sum(shares) == pytest.approx(0.05)
    assert shares[0] < shares[1] < shares[2]
    # 3 vs 3 rounds cannot go below p = 0.05: that look's share passes on to the next
    assert family_level((3, 5, 7), 1, 0.05, 1) == pytest.approx(shares[0] + shares[1])
    assert sum(family_level((3, 5, 7), j, 0.05, 1) for j in (1, 2)) <= 0.05 + 1e-12


def test_full_separation_at_the_first_look_is_not_yet_a_regression() -> None:
    # Old rule: every head above every base at 3 rounds (p = 0.05) was a regression at the first
    # look, and the looks at 5 and 7 tested at alpha again. Now the first look holds the family
    # at its share of alpha, which 3 rounds cannot reach.
    base = runs("base", [{"S": v} for v in (1.0, 1.01, 0.99)])
    head = runs("head", [{"S": v} for v in (1.3, 1.31, 1.29)])
    s = LatencySettings()
    (st, _total) = decide_stages(base, head, s, case="c", rounds={0, 1, 2})
    assert st.verdict != "regression"
    base = runs("base", [{"S": v} for v in JITTER[:5]])
    head = runs("head", [{"S": 1.3 * v} for v in JITTER[:5]])
    (st, _total) = decide_stages(base, head, s, case="c", rounds={0, 1, 2, 3, 4})
    assert st.verdict == "regression"


# --- confirmation ---------------------------------------------------------------------------------


def test_the_confirmation_batch_rejudges_every_stage() -> None:
    # The case: the detection batch flagged step03 first; DenoisingStage was slower in
    # the fresh batch too. The old confirm() re-checked step03 only and called the case suspect.
    detection = [
        StageLatency("step03", "regression", ratio=1.3, reason="r"),
        StageLatency("DenoisingStage", "inconclusive", ratio=1.15, reason="i"),
    ]
    fresh = [
        StageLatency("step03", "no_change", ratio=1.0, reason="n"),
        StageLatency("DenoisingStage", "regression", ratio=1.2, reason="slower"),
    ]
    out = {s.stage: s for s in confirm(detection, fresh)}
    assert out["DenoisingStage"].verdict == "regression"
    assert "found by the confirmation batch" in (out["DenoisingStage"].reason or "")
    assert out["step03"].verdict == "suspect"
    assert case_verdict(list(out.values())) == "regression"
    # a fresh batch that finds nothing leaves every detected regression suspect
    quiet = [StageLatency(s.stage, "no_change", reason="n") for s in fresh]
    assert case_verdict(confirm(detection, quiet)) == "suspect"


def test_simulated_session_confirms_a_regression_found_in_another_stage() -> None:
    # Detection (rounds 0-4): step03 slower. Fresh batch (rounds 5 on): step03 back to base,
    # DenoisingStage slower. The session's confirmation counts DenoisingStage.
    def script(side: Side, r: int) -> dict[str, float]:
        j = JITTER[r % 7] if side == "base" else JITTER[6 - r % 7]
        slow_step = side == "head" and r < 5
        slow_denoise = side == "head" and r >= 5
        return {
            "step03": 0.2 * j * (1.3 if slow_step else 1.0),
            "DenoisingStage": 0.5 * j * (1.4 if slow_denoise else 1.0),
        }

    runner = SimulatedPairedRunner(script)
    session = Session(cast(PairedRunner, runner), [ITEM], LatencySettings(), budget_s=None)
    session.run()
    state = session.states[ITEM.name]
    stages = {s.stage: s for s in state.stages()}
    assert len(state.detect) == 5 and state.fresh
    assert stages["DenoisingStage"].verdict == "regression"
    assert case_verdict(list(stages.values())) == "regression"


# --- contention-free time on the CPU -------------------------------------------------------------


def test_comparisons_on_the_cpu_judge_wall_time_less_run_queue_delay() -> None:
    # head's wall time is 30 % higher, all of it run-queue delay (another process's load)
    base = runs("base", [{"S": v} for v in JITTER[:5]])
    head = [
        Attempt(
            "c",
            "cpu",
            i,
            "passed",
            0,
            side="head",
            round=i,
            stages={"S": 1.3 * v},
            stage_wait={"S": 0.3 * v},
            duration_s=1.3 * v,
            wait_s=0.3 * v,
        )
        for i, v in enumerate(JITTER[:5])
    ]
    s = LatencySettings(confirm=False)
    assert case_verdict(decide_stages(base, head, s, case="c")) == "regression"
    assert case_verdict(decide_stages(base, head, s, case="c", contention_free=True)) != (
        "regression"
    )


# --- calibration ------------------------------------------------------------------------------


def test_every_verdict_of_an_uncalibrated_runner_says_so() -> None:
    base = runs("base", [{"S": v} for v in JITTER[:5]])
    head = runs("head", [{"S": 1.3 * v} for v in JITTER[:5]])
    for st in decide_stages(base, head, LatencySettings(), case="c"):
        assert "uncalibrated runner" in (st.reason or "")
    calibrated = LatencySettings(noise={"c": {"S": 0.01, "total": 0.01}})
    for st in decide_stages(base, head, calibrated, case="c"):
        assert "uncalibrated" not in (st.reason or "")


def test_noise_is_stamped_capped_and_reported_stale(tmp_path: Path) -> None:
    path = tmp_path / "cpu.json"
    store_noise(path, "cpu", "abc", {"c": {"S": {"noise": 0.5}}}, env_digest="d1")
    doc = json.loads(path.read_text())
    assert (doc["runner"], doc["env_digest"], doc["schema_version"]) == ("cpu", "d1", 2)
    fresh = load_noise(path, runner="cpu")
    assert fresh.status == "calibrated" and fresh.note is None
    assert fresh.figures["c"]["S"] == pytest.approx(0.1)  # capped: margin at most 20 %
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=45)
    stale = load_noise(path, runner="cpu", max_age_days=30, now=later)
    assert stale.status == "stale" and "stale" in (stale.note or "")
    assert "45 days old (limit 30 days" in (stale.note or "")
    settings = LatencySettings(noise=stale.figures, calibration_note=stale.note)
    base = runs("base", [{"S": v} for v in JITTER[:5]])
    head = runs("head", [{"S": v} for v in JITTER[:5]])
    (st, _total) = decide_stages(base, head, settings, case="c")
    assert "calibration stale" in (st.reason or "")
    # another runner class, or no file: uncalibrated
    assert load_noise(path, runner="h100").status == "uncalibrated"
    assert load_noise(tmp_path / "none.json", runner="cpu").status == "uncalibrated"
    # a file from before the stamps is not used
    path.write_text(json.dumps({"schema_version": 1, "cases": {"c": {"S": {"noise": 0.1}}}}))
    assert load_noise(path, runner="cpu").figures == {}


def test_noise_is_never_read_from_heads_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, base, head = tmp_path / "repo", tmp_path / "co" / "base", tmp_path / "co" / "head"
    for d in (repo, base, head):
        d.mkdir(parents=True)
    monkeypatch.chdir(repo)
    # the default folder, in the working tree (which may hold head's files): read from base
    assert noise_dir_for(Path("runners/noise"), repo=repo, base=base, head=head) == (
        base / "runners" / "noise"
    )
    assert noise_dir_for(repo / "runners" / "noise", repo=repo, base=base, head=head) == (
        base / "runners" / "noise"
    )
    outside = tmp_path / "shared-noise"
    assert noise_dir_for(outside, repo=repo, base=base, head=head) == outside
    with pytest.raises(UsageError, match=r"--noise-dir .*head's checkout"):
        noise_dir_for(head / "runners" / "noise", repo=repo, base=base, head=head)


def test_the_tests_read_from_one_table_match_the_exact_test_on_shifted_samples() -> None:
    # decide_latency reads all four p-values off one sorted table of log differences; they
    # must equal the exact Mann-Whitney test run on the shifted samples, ties included.
    from harness.compare.ranks import _p_greater

    rng = np.random.default_rng(18)
    for _ in range(300):
        m, n = (int(v) for v in rng.integers(2, 8, 2))
        b, h = rng.lognormal(0, 0.05, m), rng.lognormal(0.05, 0.05, n)
        if rng.random() < 0.3:
            h[0] = b[0]
        d = decide_latency(list(b), list(h))
        assert d.p_regression == pytest.approx(_p_greater(h, b), abs=1e-12)
        assert d.p_improvement == pytest.approx(_p_greater(b, h), abs=1e-12)
        assert d.p_above_margin == pytest.approx(_p_greater(h / 1.05, b), abs=1e-12)
        assert d.p_below_margin == pytest.approx(_p_greater(b, h * 1.05), abs=1e-12)


# --- several runs per round: the round's median is its one sample --------------------------------


def test_several_runs_in_a_round_give_one_sample_their_median() -> None:
    """Runs of one round share a worker process, so they are one sample (the median), not
    three: n counts rounds. On the old code each run was a sample (n=9/9) and an outlier run
    moved the shift."""
    from harness.compare.latency import round_samples

    def side(name: Side, per_round: list[list[float]]) -> list[Attempt]:
        out = []
        for r, secs in enumerate(per_round):
            for j, s in enumerate(secs):
                out.append(
                    Attempt(
                        "c",
                        "cpu",
                        len(out),
                        "passed",
                        0,
                        side=name,
                        round=r,
                        repeat=r * 3 + j,
                        stages={"s": s},
                        duration_s=s,
                    )
                )
        return out

    base = side("base", [[1.0, 1.02, 5.0], [0.99, 1.01, 1.0], [1.0, 0.98, 1.03]])
    head = side("head", [[1.1, 1.12, 1.11], [1.09, 1.1, 1.3], [1.1, 1.11, 1.08]])
    assert round_samples(base, None, contention_free=False)[0] == {"s": 1.02, "total": 1.02}
    settings = LatencySettings(min_stage_s=0.0)
    (st, _total) = decide_stages(base, head, settings, case="c", rounds={0, 1, 2})
    assert (st.n_base, st.n_head) == (3, 3)
    assert st.base_median_s == pytest.approx(1.0) and st.head_median_s == pytest.approx(1.1)
    # a saved run (no rounds): every run is a sample
    (st_all, _) = decide_stages(base, head, settings, case="c")
    assert (st_all.n_base, st_all.n_head) == (9, 9)
