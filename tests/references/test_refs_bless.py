"""Bless: the only writer; every refusal rule, force, attempt selection, atomic replacement."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from refs_helpers import MakeRun, Output, audio, video

from harness.errors import InputError, ReferenceStoreError
from harness.model import CheckResult, ErrorInfo
from harness.references.bless import BlessRefusedError, bless
from harness.references.store import MANIFEST_NAME, ReferenceStore


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


def test_refuses_nan_output(make_run: MakeRun, store_root: Path) -> None:
    bad = audio()
    bad[0, 10] = np.nan
    run = make_run("nan", {"t2va": {"audio": ("audio", bad, {"sample_rate": 16000})}})
    with pytest.raises(ReferenceStoreError, match=r"1 NaN/Inf value"):
        bless(run, store_root, case_id="t2va", reason="x", who="ci")
    assert _files(store_root) == []


def test_refuses_blank_frames(make_run: MakeRun, store_root: Path) -> None:
    frames = video(0)
    frames[2] = 17  # a constant frame
    run = make_run("blank", {"t2va": {"video": ("video", frames, {})}})
    with pytest.raises(ReferenceStoreError, match=r"blank or near-constant.*frame 2 std 0\.000"):
        bless(run, store_root, reason="x", who="ci")
    assert _files(store_root) == []


def test_refuses_silent_audio(make_run: MakeRun, store_root: Path) -> None:
    silent = np.zeros((1, 800), np.float32)
    run = make_run("silent", {"t2va": {"audio": ("audio", silent, {"sample_rate": 16000})}})
    with pytest.raises(ReferenceStoreError, match="silent"):
        bless(run, store_root, reason="x", who="ci")


def test_drift_refused_then_forced(make_run: MakeRun, store_root: Path) -> None:
    first = make_run("a", {"t2va": {"video": ("video", video(0), {})}})
    bless(first, store_root, reason="initial", who="alice")
    manifest_before = (store_root / MANIFEST_NAME).read_text()
    files_before = _files(store_root)

    drifted = np.clip(video(0).astype(int) + 60, 0, 255).astype(np.uint8)
    second = make_run("b", {"t2va": {"video": ("video", drifted, {})}})
    with pytest.raises(ReferenceStoreError, match=r"worst-frame mean abs diff .* > 8\.0") as info:
        bless(second, store_root, reason="new vae", who="bob")
    assert "--force" in str(info.value)
    assert (store_root / MANIFEST_NAME).read_text() == manifest_before
    assert _files(store_root) == files_before

    summary = bless(
        second, store_root, reason="new VAE decoder, checked by eye", who="bob", force=True
    )
    (blessed,) = summary.blessed
    assert blessed.replaced and blessed.drift["worst_frame_mae"] > 8
    store = ReferenceStore(store_root)
    entry = store.lookup("t2va", "video", ["any"])
    assert entry.blessed.reason == "new VAE decoder, checked by eye"
    assert entry.blessed.forced and entry.blessed.who == "bob" and entry.blessed.run_id == "b"
    np.testing.assert_array_equal(store.load_video(entry), drifted)
    assert store.verify() == []  # the replaced frames were removed


def test_small_drift_is_accepted_and_recorded(make_run: MakeRun, store_root: Path) -> None:
    bless(make_run("a", {"c": {"video": ("video", video(0), {})}}), store_root, reason="i", who="a")
    nudged = video(0)
    nudged[1, 0, 0, 0] ^= 1
    summary = bless(
        make_run("b", {"c": {"video": ("video", nudged, {})}}),
        store_root,
        reason="rebless",
        who="a",
    )
    assert summary.blessed[0].drift["worst_frame_ssim"] > 0.99


def test_shape_change_is_drift(make_run: MakeRun, store_root: Path) -> None:
    bless(
        make_run("a", {"c": {"t": ("tensor", np.ones((2, 3), np.float32), {})}}),
        store_root,
        reason="i",
        who="a",
    )
    run = make_run("b", {"c": {"t": ("tensor", np.ones((3, 3), np.float32), {})}})
    with pytest.raises(ReferenceStoreError, match=r"shape changed from \[2, 3\] to \[3, 3\]"):
        bless(run, store_root, reason="r", who="a")


def test_takes_last_passing_measured_attempt(make_run: MakeRun, store_root: Path) -> None:
    failed: dict[str, Output] = {"video": ("video", video(2), {})}
    good: dict[str, Output] = {"video": ("video", video(3), {})}
    run = make_run(
        "sel",
        {"c": {"video": ("video", video(4), {})}},
        before={"c": [(good, {}), (failed, {"status": "error"})]},
    )
    # the final attempt is a warmup: it must not be chosen
    report = json.loads((run / "report.json").read_text())
    report["cases"][0]["attempts"][-1]["warmup"] = True
    (run / "report.json").write_text(json.dumps(report))
    bless(run, store_root, reason="r", who="a")
    store = ReferenceStore(store_root)
    np.testing.assert_array_equal(store.load_video(store.lookup("c", "video", ["any"])), video(3))


def test_first_bless_from_attempt_failing_only_quality(make_run: MakeRun, store_root: Path) -> None:
    no_ref = CheckResult(
        "ssim(video)", "ssim", None, ">=", 0.98, "fail", False, "video", "no reference"
    )
    run = make_run(
        "first",
        {"c": {"video": ("video", video(0), {})}},
        status="failed",
        error=ErrorInfo("CheckFailed", "checks failed: ssim(video)", "sig"),
        checks=(no_ref,),
    )
    summary = bless(run, store_root, reason="first", who="a")
    assert [b.output for b in summary.blessed] == ["video"]
    entry = ReferenceStore(store_root).lookup("c", "video", ["any"])
    assert "ssim(video)" in entry.metric_settings


def test_refuses_attempt_that_errored(make_run: MakeRun, store_root: Path) -> None:
    run = make_run(
        "err",
        {"c": {"video": ("video", video(0), {})}},
        status="error",
        error=ErrorInfo("RuntimeError", "boom", "sig"),
    )
    with pytest.raises(ReferenceStoreError, match="no passing measured attempt"):
        bless(run, store_root, reason="r", who="a")


def test_partial_bless_reports_refusals(make_run: MakeRun, store_root: Path) -> None:
    blank = np.zeros((2, 16, 16, 3), np.uint8)
    run = make_run(
        "two", {"good": {"video": ("video", video(0), {})}, "bad": {"video": ("video", blank, {})}}
    )
    with pytest.raises(BlessRefusedError) as info:
        bless(run, store_root, reason="r", who="a")
    summary = info.value.summary
    assert [b.reference_id for b in summary.blessed] == ["good"]
    assert len(summary.refused) == 1 and "bad" in summary.refused[0]
    store = ReferenceStore(store_root)
    assert store.get("bad", "video", "any") is None
    assert store.get("good", "video", "any") is not None and store.verify() == []


def test_bad_inputs(make_run: MakeRun, store_root: Path, tmp_path: Path) -> None:
    run = make_run("in", {"c": {"video": ("video", video(0), {})}})
    with pytest.raises(InputError, match="case 'zzz' is not in the run"):
        bless(run, store_root, case_id="zzz", reason="r", who="a")
    with pytest.raises(InputError, match="needs a reason"):
        bless(run, store_root, reason="  ", who="a")
    with pytest.raises(InputError, match=r"no report\.json"):
        bless(tmp_path / "nowhere", store_root, reason="r", who="a")


def test_who_defaults_to_user(
    make_run: MakeRun, store_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("USER", "carol")
    bless(make_run("w", {"c": {"video": ("video", video(0), {})}}), store_root, reason="r")
    assert ReferenceStore(store_root).lookup("c", "video", ["any"]).blessed.who == "carol"
