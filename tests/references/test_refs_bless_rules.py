"""Bless never pins a regression by accident: the first-bless rule, the case's own thresholds,
drift into a new platform class, simulated and failing cases, and run files changed after the
run (whose content hash no longer matches the attempt's record)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from refs_helpers import ENV, MakeRun, audio, video
from safetensors.numpy import save_file

from harness import media, probe
from harness.errors import ReferenceStoreError
from harness.fsio import read_array
from harness.model import Attempt, CaseResult, CheckResult, ErrorInfo, RunReport
from harness.references.bless import bless
from harness.references.store import MANIFEST_NAME, ReferenceStore

FAILED_ONLY_QUALITY = ErrorInfo("CheckFailed", "checks failed: ssim(video)", "sig")


def _check(metric: str, op: str, threshold: float, passed: bool, **kw: Any) -> CheckResult:
    return CheckResult(
        f"{metric}({kw.get('output', 'video')})",
        metric,
        kw.pop("value", None),
        op,
        threshold,
        "fail",
        passed,
        kw.pop("output", "video"),
        kw.pop("reason", None),
        settings=kw.pop("settings", {}),
    )


def _noisy(k: int, seed: int = 3) -> np.ndarray:
    """video(0) plus uniform noise of +-k levels: k=8 gives worst-frame MAE ~4.3, SSIM ~0.95,
    inside the built-in bounds (MAE <= 8, SSIM >= 0.9) but outside MAE <= 1.5, SSIM >= 0.98."""
    rng = np.random.default_rng(seed)
    v = video(0).astype(int) + rng.integers(-k, k + 1, video(0).shape)
    return np.clip(v, 0, 255).astype(np.uint8)


@pytest.fixture
def pinned(make_run: MakeRun, store_root: Path) -> Path:
    """A store holding c/any/video = video(0)."""
    bless(make_run("first", {"c": {"video": ("video", video(0), {})}}), store_root, reason="i")
    return store_root


def _video_of(store_root: Path, platform_class: str = "any") -> np.ndarray:
    store = ReferenceStore(store_root)
    entry = store.get("c", "video", platform_class)
    assert entry is not None
    return store.load_video(entry)


# --- 1a: the first-bless rule only where no reference exists ----------------------------------


def test_attempt_failing_quality_is_not_blessed_over_a_reference(
    make_run: MakeRun, pinned: Path
) -> None:
    nudged = video(0)
    nudged[1, 0, 0, 0] ^= 1  # far inside every drift bound: only the rule can refuse it
    failing = _check(
        "ssim", ">=", 0.99999, False, value=0.99998, reason="ssim of 'video' is 0.99998"
    )
    run = make_run(
        "second",
        {"c": {"video": ("video", nudged, {})}},
        status="failed",
        error=FAILED_ONLY_QUALITY,
        checks=(failing,),
    )
    manifest = (pinned / MANIFEST_NAME).read_text()
    with pytest.raises(ReferenceStoreError) as info:
        bless(run, pinned, reason="r", who="a")
    message = str(info.value)
    assert "may be blessed only for outputs without a reference" in message
    assert "c/any/video" in message and "ssim of 'video' is 0.99998" in message
    assert "--force" in message
    assert (pinned / MANIFEST_NAME).read_text() == manifest

    bless(run, pinned, reason="the new threshold is wrong, not the output", who="a", force=True)
    np.testing.assert_array_equal(_video_of(pinned), nudged)


def test_first_bless_rule_still_adds_a_new_output(make_run: MakeRun, pinned: Path) -> None:
    # the video check passed against its reference; only the new output has none yet
    checks = (
        _check("ssim", ">=", 0.98, True, value=1.0),
        _check("audio_snr", ">=", 40, False, output="audio", reason="no reference"),
    )
    run = make_run(
        "more",
        {
            "c": {
                "video": ("video", video(0), {}),
                "audio": ("audio", audio(), {"sample_rate": 16000}),
            }
        },
        status="failed",
        error=FAILED_ONLY_QUALITY,
        checks=checks,
    )
    summary = bless(run, pinned, reason="adds audio", who="a")
    assert sorted(b.output for b in summary.blessed) == ["audio", "video"]


# --- 1b: never looser than the case's own thresholds ------------------------------------------


@pytest.mark.parametrize(
    ("check", "bound"),
    [
        (
            _check("mae", "<=", 1.5, True, value=0.0),
            r"mae\(video\) 4\.\d+ \(worst frame\) is not <= 1\.5",
        ),
        (
            _check("ssim", ">=", 0.98, True, value=1.0, settings={"sigma": 1.5}),
            r"ssim\(video\) 0\.9\d+ \(worst frame\) is not >= 0\.98",
        ),
    ],
)
def test_drift_uses_the_case_thresholds(
    make_run: MakeRun, pinned: Path, check: CheckResult, bound: str
) -> None:
    # The attempt passed its checks (against some other store); against this store's reference
    # it fails them, though it stays inside the built-in bounds.
    run = make_run("noisy", {"c": {"video": ("video", _noisy(8), {})}}, checks=(check,))
    with pytest.raises(ReferenceStoreError, match=bound) as info:
        bless(run, pinned, reason="r", who="a")
    assert "the case's own threshold" in str(info.value)
    assert "worst-frame mean abs diff" not in str(info.value)  # the floor was not what refused
    np.testing.assert_array_equal(_video_of(pinned), video(0))


def test_case_thresholds_recorded_in_drift(make_run: MakeRun, pinned: Path) -> None:
    checks = (_check("mae", "<=", 1.5, True, value=0.0), _check("psnr", ">=", 30, True))
    run = make_run("same", {"c": {"video": ("video", _noisy(1), {})}}, checks=checks)
    (blessed,) = bless(run, pinned, reason="r", who="a").blessed
    assert 0 < blessed.drift["mae(video)"] <= 1.5 and blessed.drift["psnr(video)"] >= 30
    assert "worst_frame_mae" in blessed.drift  # the built-in floor still ran


def test_warn_checks_are_recorded_not_enforced(make_run: MakeRun, pinned: Path) -> None:
    warn = CheckResult("ssim(video)", "ssim", 1.0, ">=", 0.98, "warn", True, "video")
    run = make_run("warned", {"c": {"video": ("video", _noisy(8), {})}}, checks=(warn,))
    (blessed,) = bless(run, pinned, reason="r", who="a").blessed  # as in the case: a warning
    assert 0.9 < blessed.drift["ssim(video)"] < 0.98


def test_builtin_bounds_still_apply_without_checks(make_run: MakeRun, pinned: Path) -> None:
    loose = (_check("mae", "<=", 100, True, value=0.0),)  # looser than the floor
    drifted = np.clip(video(0).astype(int) + 60, 0, 255).astype(np.uint8)
    run = make_run("far", {"c": {"video": ("video", drifted, {})}}, checks=loose)
    with pytest.raises(ReferenceStoreError, match=r"worst-frame mean abs diff .* > 8\.0"):
        bless(run, pinned, reason="r", who="a")


# --- 1c: a new platform class is compared with the reference it shadows -----------------------


def test_new_platform_class_is_drift_checked(make_run: MakeRun, pinned: Path) -> None:
    drifted = np.clip(video(0).astype(int) + 60, 0, 255).astype(np.uint8)
    run = make_run("mi", {"c": {"video": ("video", drifted, {})}}, platform="hip")
    with pytest.raises(ReferenceStoreError) as info:
        bless(run, pinned, reason="r", who="a", platform_class="mi300x")
    message = str(info.value)
    assert "drifts from c/any/video" in message and "['mi300x', 'hip', 'any']" in message
    assert ReferenceStore(pinned).get("c", "video", "mi300x") is None

    nudged = video(0)
    nudged[0, 0, 0, 0] ^= 1
    close = make_run("mi-close", {"c": {"video": ("video", nudged, {})}}, platform="hip")
    (blessed,) = bless(close, pinned, reason="r", who="a", platform_class="mi300x").blessed
    assert blessed.drift["against"] == "c/any/video" and not blessed.replaced
    np.testing.assert_array_equal(_video_of(pinned, "mi300x"), nudged)
    np.testing.assert_array_equal(_video_of(pinned, "any"), video(0))


# --- 1d: simulated results and failing cases --------------------------------------------------


@pytest.mark.parametrize("force", [False, True])
def test_simulated_result_is_never_blessed(
    make_run: MakeRun, store_root: Path, force: bool
) -> None:
    run = make_run("sim", {"c": {"video": ("video", video(0), {})}}, platform="hip", simulated=True)
    with pytest.raises(
        ReferenceStoreError, match="a simulated hip result can never be a reference"
    ):
        bless(run, store_root, reason="r", who="a", force=force)
    assert not (store_root / MANIFEST_NAME).exists()


def test_case_level_check_failure_refuses_unless_forced(
    make_run: MakeRun, store_root: Path
) -> None:
    differ = CheckResult(
        "identical_outputs",
        "identical_outputs",
        False,
        "==",
        True,
        "fail",
        False,
        reason="outputs differ between attempts: video",
    )
    run = make_run("rep", {"c": {"video": ("video", video(0), {})}}, case_checks=(differ,))
    with pytest.raises(ReferenceStoreError, match=r"case-level check.*identical_outputs") as info:
        bless(run, store_root, reason="r", who="a")
    assert "outputs differ between attempts: video" in str(info.value)
    assert not (store_root / MANIFEST_NAME).exists()
    bless(run, store_root, reason="nondeterminism understood", who="a", force=True)
    assert ReferenceStore(store_root).get("c", "video", "any") is not None


# --- 1e: the file bless reads must be the one the attempt recorded ----------------------------


def _output_path(run: Path, case: str = "c", output: str = "video") -> Path:
    report = json.loads((run / "report.json").read_text())
    result = next(r for r in report["cases"] if r["id"] == case)
    return run / result["attempts"][-1]["outputs"][output]["path"]


@pytest.mark.parametrize("force", [False, True])
def test_tampered_run_file_is_refused(make_run: MakeRun, store_root: Path, force: bool) -> None:
    run = make_run("t", {"c": {"video": ("video", video(0), {})}})
    save_file({"data": video(1)}, str(_output_path(run)))  # edited after the run
    with pytest.raises(ReferenceStoreError, match="does not match the attempt's record"):
        bless(run, store_root, reason="r", who="a", force=force)
    assert not (store_root / MANIFEST_NAME).exists()


def test_swapped_run_files_are_refused(make_run: MakeRun, store_root: Path) -> None:
    run = make_run(
        "s", {"a": {"video": ("video", video(0), {})}, "b": {"video": ("video", video(1), {})}}
    )
    pa, pb = _output_path(run, "a"), _output_path(run, "b")
    da, db = pa.read_bytes(), pb.read_bytes()
    pa.write_bytes(db)
    pb.write_bytes(da)
    with pytest.raises(ReferenceStoreError) as info:
        bless(run, store_root, reason="r", who="a")
    assert str(info.value).count("does not match the attempt's record") == 2


def _probe_run(tmp_path: Path, record: Any) -> Path:
    """A run folder whose one attempt was recorded by the real probe (``record()`` calls it)."""
    run = tmp_path / "probe-run"
    rec = probe._begin(0, "cpu", run / "attempts" / "c-0")
    try:
        record()
    finally:
        probe._end()
    attempt = Attempt(
        case_id="c", platform="cpu", index=0, status="passed", seed=0, outputs=rec.outputs
    )
    result = CaseResult(
        id="c", kind="pipeline", platform="cpu", status="passed", attempts=(attempt,)
    )
    report = RunReport("p", "t0", "t1", ("harness",), "cpu", ENV, (result,))
    (run / "report.json").write_text(json.dumps(report.to_json()))
    return run


def test_bf16_tensor_hash_is_recomputed_exactly(tmp_path: Path, store_root: Path) -> None:
    t = torch.linspace(-3, 3, 24, dtype=torch.bfloat16).reshape(4, 6)
    run = _probe_run(tmp_path, lambda: probe.output("latents", t, kind="tensor"))
    info = json.loads((run / "report.json").read_text())["cases"][0]["attempts"][0]["outputs"]
    assert info["latents"]["dtype"] == "bfloat16"  # hashed as bf16, saved widened to float32
    bless(run, store_root, reason="r", who="a")
    entry = ReferenceStore(store_root).lookup("c", "latents", ["any"])
    assert entry.source_hash == info["latents"]["hash"]

    path = _output_path(run, output="latents")
    a = np.array(read_array(path))
    a.view(np.uint32)[0, 0] ^= 1  # a low mantissa bit: rounds back to the same bf16 value
    save_file({"data": a}, str(path))
    with pytest.raises(ReferenceStoreError, match="not all bfloat16 values"):
        bless(run, tmp_path / "other-store", reason="r", who="a")


def test_file_output_hash_is_of_the_file_bytes(tmp_path: Path, store_root: Path) -> None:
    wav = tmp_path / "clip.wav"
    media.write_wav(wav, audio(), 16000)
    run = _probe_run(tmp_path, lambda: probe.output("audio", wav, kind="audio", sample_rate=16000))
    bless(run, store_root, reason="r", who="a")
    assert ReferenceStore(store_root).get("c", "audio", "any") is not None

    copied = _output_path(run, output="audio")
    media.write_wav(copied, audio() * 0.5, 16000)
    with pytest.raises(ReferenceStoreError, match="does not match the attempt's record"):
        bless(run, tmp_path / "other-store", reason="r", who="a")
