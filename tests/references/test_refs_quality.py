"""Quality checks against pinned references: verdicts, per-frame details, readable tables."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from refs_helpers import MakeRun, audio, video
from safetensors.numpy import save_file

from harness.checks.quality import CLIP_NOT_CONFIGURED, compare, evaluate, lacks_reference
from harness.model import Case, CheckResult, CheckSpec
from harness.references.bless import bless
from harness.references.store import ReferenceStore
from harness.report.text import explain_check as format_table

CASE = Case(
    id="t2va", kind="pipeline", source="cases/pipeline/t2va.toml", target="m:f", frames="all"
)
CHAIN = ["cpu", "any"]


@pytest.fixture
def store(make_run: MakeRun, store_root: Path) -> ReferenceStore:
    run = make_run(
        "ref",
        {
            "t2va": {
                "video": ("video", video(0), {"fps": 8}),
                "audio": ("audio", audio(), {"sample_rate": 16000}),
            }
        },
    )
    bless(run, store_root, reason="initial", who="alice")
    return ReferenceStore(store_root)


def _outputs(**arrays: np.ndarray) -> dict[str, dict[str, Any]]:
    return {n: {"kind": "audio" if n == "audio" else "video"} for n in arrays}


def _check(metric: str, op: str, threshold: float, **kw: Any) -> CheckSpec:
    return CheckSpec(
        metric=metric,
        op=op,
        threshold=threshold,
        output=kw.pop("output", "video"),
        name=f"{metric}(video)",
        **kw,
    )


def test_identical_output_passes(store: ReferenceStore) -> None:
    arrays = {"video": video(0)}
    ssim = evaluate(_check("ssim", ">=", 0.98), CASE, CHAIN, _outputs(**arrays), arrays, store)
    assert ssim.passed is True and ssim.value == pytest.approx(1.0)
    assert [r["frame"] for r in ssim.details] == [0, 1, 2, 3]
    assert ssim.settings["sigma"] == 1.5 and ssim.settings["data_range"] == 255.0
    assert ssim.settings["reference"] == "t2va/any/video"
    psnr = evaluate(_check("psnr", ">=", 40.0), CASE, CHAIN, _outputs(**arrays), arrays, store)
    assert psnr.passed is True and math.isinf(psnr.value)
    assert CheckResult.from_json(psnr.to_json()) == psnr  # inf survives JSON


def test_degraded_output_fails_with_table(store: ReferenceStore) -> None:
    degraded = video(0)
    rng = np.random.default_rng(5)
    degraded[2] = np.clip(degraded[2] + rng.integers(-90, 91, degraded[2].shape), 0, 255)
    arrays = {"video": degraded}
    spec = _check("ssim", ">=", 0.95, thresholds={"hip": 0.9})
    check = evaluate(spec, CASE, CHAIN, _outputs(**arrays), arrays, store)
    assert check.passed is False and check.threshold == 0.95
    rows = {r["frame"]: r for r in check.details}
    assert rows[2]["passed"] is False and rows[0]["passed"] is True
    assert check.value == pytest.approx(rows[2]["obtained"])
    assert check.reason and "failing frames: 2" in check.reason
    table = format_table(check)
    lines = table.splitlines()
    assert lines[0].startswith("ssim(video): FAILED, obtained 0.")
    assert "required >= 0.95" in lines[0]
    assert any("sigma=1.5" in line for line in lines)
    assert any(line.split()[:2] == ["ssim", "2"] and line.split()[-1] == "NO" for line in lines)
    header = next(line for line in lines if "metric" in line and "frame" in line)
    assert header.split() == ["metric", "frame", "obtained", "op", "threshold", "passed"]
    # the platform threshold applies on hip
    hip = evaluate(spec, CASE, ["hip", "any"], _outputs(**arrays), arrays, store)
    assert hip.threshold == 0.9


def test_frame_selection_and_mean(store: ReferenceStore) -> None:
    arrays = {"video": video(0)}
    case = Case(id="t2va", kind="pipeline", source="x", target="m:f")  # first-mid-last
    check = evaluate(_check("mae", "<=", 1.0), case, CHAIN, _outputs(**arrays), arrays, store)
    assert [r["frame"] for r in check.details] == [0, 2, 3] and check.passed
    mean = evaluate(
        _check("mae", "<=", 1.0, frames=(1,), reduce="mean"),
        case,
        CHAIN,
        _outputs(**arrays),
        arrays,
        store,
    )
    assert [r["frame"] for r in mean.details] == [1] and mean.settings["reduce"] == "mean"


def test_missing_reference_fails(store: ReferenceStore) -> None:
    arrays = {"video": video(0)}
    spec = _check("ssim", ">=", 0.98)
    none = evaluate(spec, CASE, CHAIN, _outputs(**arrays), arrays, None)
    assert none.passed is False and "no reference store" in (none.reason or "")
    other = Case(id="other", kind="pipeline", source="x", target="m:f")
    missing = evaluate(spec, other, CHAIN, _outputs(**arrays), arrays, store)
    assert missing.passed is False and "no reference 'other'" in (missing.reason or "")
    assert "NOT RUN" not in format_table(missing) and "FAILED" in format_table(missing)
    no_output = evaluate(_check("ssim", ">=", 0.9, output="vid"), CASE, CHAIN, {}, {}, store)
    assert no_output.passed is False and "no output 'vid'" in (no_output.reason or "")
    # Blessing fixes the first two (`harness run` prints the command), not a missing output.
    assert lacks_reference(none) and lacks_reference(missing)
    assert not lacks_reference(no_output)


def test_tampered_reference_fails(store: ReferenceStore, store_root: Path) -> None:
    entry = store.lookup("t2va", "video", CHAIN)
    (store_root / entry.files[0].path).write_bytes(b"garbage")
    arrays = {"video": video(0)}
    check = evaluate(_check("ssim", ">=", 0.9), CASE, CHAIN, _outputs(**arrays), arrays, store)
    assert check.passed is False and "does not match the manifest" in (check.reason or "")
    assert not lacks_reference(check)  # a tampered store is not fixed by a first bless


def test_shape_mismatch_fails(store: ReferenceStore) -> None:
    arrays = {"video": video(0, frames=3)}
    check = evaluate(_check("psnr", ">=", 30), CASE, CHAIN, _outputs(**arrays), arrays, store)
    assert check.passed is False
    assert "[3, 32, 32, 3]" in (check.reason or "") and "[4, 32, 32, 3]" in (check.reason or "")


def test_clip_not_configured(store: ReferenceStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HARNESS_CLIP_MODEL", raising=False)
    arrays = {"video": video(0)}
    check = evaluate(_check("clip", ">=", 0.9), CASE, CHAIN, _outputs(**arrays), arrays, store)
    assert check.passed is None and check.reason == CLIP_NOT_CONFIGURED
    assert "(set HARNESS_CLIP_MODEL)" in check.reason
    assert not check.blocking and format_table(check).startswith("clip(video): NOT RUN")


def test_audio_metrics(store: ReferenceStore) -> None:
    arrays = {"audio": audio()}
    spec = CheckSpec(metric="audio_snr", op=">=", threshold=30.0, output="audio", name="snr")
    check = evaluate(spec, CASE, CHAIN, _outputs(**arrays), arrays, store)
    assert check.passed is True and math.isinf(check.value)
    noisy = {
        "audio": (audio() + 0.2 * np.random.default_rng(1).standard_normal((1, 8000))).astype(
            np.float32
        )
    }
    bad = evaluate(spec, CASE, CHAIN, _outputs(**noisy), noisy, store)
    assert bad.passed is False and bad.details[0]["frame"] == "all"
    assert "max_lag_samples" in bad.settings
    # no output named: the only audio output is picked
    auto = CheckSpec(metric="audio_mad", op="<=", threshold=1e-6, name="mad")
    assert evaluate(auto, CASE, CHAIN, _outputs(**arrays), arrays, store).passed is True


def test_audio_desync_fails_the_lag_check_in_milliseconds(store: ReferenceStore) -> None:
    ref = audio()  # 16 kHz in the store
    spec = CheckSpec(metric="audio_lag_ms", op="<=", threshold=10.0, output="audio", name="lag")
    same = {"audio": ref}
    ok = evaluate(spec, CASE, CHAIN, _outputs(**same), same, store)
    assert ok.passed is True and ok.value == 0.0 and ok.settings["sample_rate"] == 16000
    shift = 480  # 30 ms at 16 kHz: inside the alignment window, beyond the case's tolerance
    late = {"audio": np.concatenate([np.zeros((1, shift), np.float32), ref], axis=1)[:, :8000]}
    bad = evaluate(spec, CASE, CHAIN, _outputs(**late), late, store)
    assert bad.passed is False and bad.value == pytest.approx(30.0)
    assert "audio_lag_ms" in (bad.reason or "") and bad.settings["unit"] == "ms"


def test_output_read_from_file(store: ReferenceStore, tmp_path: Path) -> None:
    path = tmp_path / "video.safetensors"
    save_file({"data": video(0)}, str(path))
    outputs = {"video": {"kind": "video", "path": str(path)}}
    check = evaluate(_check("max_abs", "==", 0), CASE, CHAIN, outputs, {}, store)
    assert check.passed is True and check.value == 0


def test_bad_settings_fail_not_crash(store: ReferenceStore) -> None:
    arrays = {"video": video(0)}
    spec = _check("ssim", ">=", 0.9, settings={"windw": 7})
    check = evaluate(spec, CASE, CHAIN, _outputs(**arrays), arrays, store)
    assert check.passed is False and "windw" in (check.reason or "")


@pytest.mark.parametrize(
    ("value", "op", "threshold", "expected"),
    [
        (1.0, ">=", 1.0, True),
        (1.0, ">", 1.0, False),
        (0.5, "<=", 1, True),
        (2, "<", 1, False),
        (3, "==", 3, True),
        (3, "!=", 3, False),
        (math.nan, ">=", 0.0, False),
        (math.inf, ">=", 40.0, True),
        (None, ">=", 1.0, False),
    ],
)
def test_compare(value: Any, op: str, threshold: Any, expected: bool) -> None:
    assert compare(value, op, threshold) is expected


def test_unreadable_manifest_fails_the_check(store_root: Path) -> None:
    store_root.mkdir()
    (store_root / "manifest.json").write_text("{not json")
    arrays = {"video": video(0)}
    store = ReferenceStore(store_root)
    check = evaluate(_check("ssim", ">=", 0.9), CASE, CHAIN, _outputs(**arrays), arrays, store)
    assert check.passed is False and "cannot read the reference manifest" in (check.reason or "")


# --- dtype and value scale: never compared silently -------------------------------------------


def test_float_frames_never_pass_against_uint8_frames(store: ReferenceStore) -> None:
    for frames in (video(0).astype(np.float32), video(0).astype(np.float64) / 255.0):
        arrays = {"video": frames}
        for metric, op, threshold in (("ssim", ">=", 0.5), ("mae", "<=", 300.0)):
            check = evaluate(
                _check(metric, op, threshold), CASE, CHAIN, _outputs(**arrays), arrays, store
            )
            assert check.passed is False, (frames.dtype, metric)
            assert f"is {frames.dtype} frames, but reference t2va/any/video is uint8" in (
                check.reason or ""
            )


def test_tensor_dtype_change_fails(make_run: MakeRun, store_root: Path) -> None:
    latents = np.linspace(-1, 1, 32, dtype=np.float32).reshape(4, 8)
    bless(make_run("t", {"t2va": {"latents": ("tensor", latents, {})}}), store_root, reason="r")
    store = ReferenceStore(store_root)
    spec = CheckSpec(metric="max_abs", op="<=", threshold=1e-3, output="latents", name="m")
    outputs = {"latents": {"kind": "tensor"}}
    same = {"latents": latents}
    assert evaluate(spec, CASE, CHAIN, outputs, same, store).passed is True
    wider = {"latents": latents.astype(np.float64)}  # equal values: max_abs would be 0
    check = evaluate(spec, CASE, CHAIN, outputs, wider, store)
    assert check.passed is False
    assert "is float64, but reference t2va/any/latents was blessed from a float32" in (
        check.reason or ""
    )


def test_audio_dtype_rules(make_run: MakeRun, store: ReferenceStore, store_root: Path) -> None:
    spec = CheckSpec(metric="audio_snr", op=">=", threshold=40.0, output="audio", name="snr")
    wider = {"audio": audio().astype(np.float64)}
    check = evaluate(spec, CASE, CHAIN, _outputs(**wider), wider, store)
    assert check.passed is False and "was blessed from a float32" in (check.reason or "")
    pcm16 = {"audio": (audio() * 32767).astype(np.int16)}
    check = evaluate(spec, CASE, CHAIN, _outputs(**pcm16), pcm16, store)
    assert check.passed is False and "is int16 PCM" in (check.reason or "")

    # blessed from float64 and produced as float64: compared at the store's float32, stated
    pcm64 = audio().astype(np.float64)
    run = make_run("a64", {"a64": {"audio": ("audio", pcm64, {"sample_rate": 16000})}})
    bless(run, store_root, reason="r", who="a")
    case = Case(id="a64", kind="pipeline", source="x", target="m:f")
    arrays = {"audio": pcm64}
    check = evaluate(spec, case, CHAIN, _outputs(**arrays), arrays, ReferenceStore(store_root))
    assert check.passed is True and math.isinf(check.value)
    assert check.settings["converted"] == (
        "float64 -> float32 (audio references are stored as float32 WAV)"
    )
