"""Quality findings of a comparison on real output files and a real reference store (written
by the references writer, as bless writes it): every frame of every output, NaN, audio with
its sample rate, and a simulated platform judged against another platform's reference."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from harness import probe
from harness.compare.judge import judge_case
from harness.compare.quality import quality_findings, quality_verdict, worse_by
from harness.fsio import write_array
from harness.model import Attempt, CaseResult, CheckResult, QualityFinding, RunReport
from harness.references.manifest import BlessInfo, Manifest
from harness.references.writer import Prepared, write_entry, write_manifest

RATE = 16000
WHEN = "2026-12-01T00:00:00+00:00"


def clip() -> tuple[np.ndarray, np.ndarray]:
    """9 frames of 32x32 RGB and 0.2 s of audio, as tests/compare/mediarepo.py renders."""
    video = np.random.default_rng(7).integers(0, 256, (9, 32, 32, 3), dtype=np.uint8)
    t = np.arange(RATE // 5) / RATE
    return video, (0.5 * np.sin(2 * np.pi * 440.0 * t)).astype(np.float32)


def bless(store: Path, outputs: dict[str, np.ndarray], *, platform: str, cls: str = "any") -> None:
    """Pin ``outputs`` as reference ``clip`` of platform class ``cls``, blessed from a result
    on ``platform``."""
    result = CaseResult("clip", "pipeline", platform, "passed", reference="clip")
    report = RunReport("src", "t0", "t1", (), platform, {"device_count": 0, "devices": []}, ())
    info = BlessInfo("test", "t", WHEN)
    entries = {}
    for name, array in outputs.items():
        kind = "audio" if array.ndim == 1 else "video"
        meta = {"sample_rate": RATE} if kind == "audio" else {"fps": 8}
        out = {"hash": probe.content_hash(array), "meta": meta}
        p = Prepared(name, kind, array, out, {}, None, {})
        e = write_entry(store, result, p, cls, info, report)
        entries[(e.reference_id, e.platform_class, e.output)] = e
    write_manifest(store, Manifest(entries=entries))


def check(metric: str, output: str, value: float, cls: str = "any") -> CheckResult:
    settings = {"reference": f"clip/{cls}/{output}", "reference_blessed": WHEN}
    return CheckResult(
        f"{metric}({output})", metric, value, ">=", 0.0, "fail", True, output, settings=settings
    )


def attempt(
    tmp: Path, side: str, rnd: int, arrays: dict[str, np.ndarray], checks: list[CheckResult]
) -> Attempt:
    outputs: dict[str, dict[str, Any]] = {}
    for name, a in arrays.items():
        path = tmp / f"{side}-{name}-{probe.content_hash(a)[-12:]}.safetensors"
        write_array(path, a)
        kind = "audio" if a.ndim == 1 else "video"
        meta = {"sample_rate": RATE} if kind == "audio" else {"fps": 8}
        outputs[name] = {
            "kind": kind,
            "hash": probe.content_hash(a),
            "path": path.name,
            "meta": meta,
        }
    return Attempt(
        "clip",
        "cpu",
        rnd,
        "passed",
        1,
        repeat=rnd,
        round=rnd,
        side=side,  # type: ignore[arg-type]
        outputs=outputs,
        checks=tuple(checks),
    )


def findings(
    tmp: Path,
    base: dict[str, np.ndarray],
    head: dict[str, np.ndarray],
    checks: dict[str, list[CheckResult]],
    **kw: Any,
) -> dict[tuple[str, str], QualityFinding]:
    b = [attempt(tmp, "base", i, base, checks["base"]) for i in range(2)]
    h = [attempt(tmp, "head", i, head, checks["head"]) for i in range(2)]
    got = quality_findings(None, b, h, base_root=tmp, head_root=tmp, **kw)
    return {(f.output, f.metric): f for f in got}


@pytest.fixture
def store(tmp_path: Path) -> Path:
    video, audio = clip()
    root = tmp_path / "refs"
    bless(root, {"video": video, "audio": audio}, platform="cpu")
    return root


def test_middle_frames_blacked_out_are_a_regression_naming_the_worst_frame(
    tmp_path: Path, store: Path
) -> None:
    video, audio = clip()
    dark = video.copy()
    dark[1:4] = 0
    dark[5:8] = 0
    dark[6] = np.where(video[6] < 128, 255, 0)  # the furthest from the reference of all
    # the checks saw frames 0, 4 and 8 only: identical to the reference on both sides
    checks = [check("psnr", "video", float("inf")), check("audio_snr", "audio", float("inf"))]
    f = findings(
        tmp_path,
        {"video": video, "audio": audio},
        {"video": dark, "audio": audio},
        {"base": checks, "head": checks},
        references=store,
    )
    psnr = f[("video", "psnr")]
    assert psnr.verdict == "regression" and psnr.worst_frame == 6 and psnr.frames == 9
    assert psnr.base_vs_ref == float("inf") and psnr.head_vs_ref is not None
    assert psnr.head_vs_ref < 10 and "frame 6 of 9" in (psnr.reason or "")
    assert psnr.reference == "clip/any/video" and psnr.reference_platform == "cpu"
    assert psnr.head_vs_base is not None and psnr.head_vs_base < 10
    assert f[("audio", "audio_snr")].verdict == "no_change"
    assert quality_verdict(list(f.values())) == "regression"


def test_swapping_base_and_head_turns_the_blackout_into_an_improvement(
    tmp_path: Path, store: Path
) -> None:
    video, _audio = clip()
    dark = video.copy()
    dark[2] = 0
    checks = [check("psnr", "video", float("inf"))]
    f = findings(
        tmp_path,
        {"video": dark},
        {"video": video},
        {"base": checks, "head": checks},
        references=store,
    )[("video", "psnr")]
    assert (f.verdict, f.worst_frame, f.foreign_reference) == ("improvement", 2, False)


def test_a_reference_re_blessed_since_the_runs_is_not_read(tmp_path: Path, store: Path) -> None:
    video, _audio = clip()
    dark = video.copy()
    dark[2] = 0
    old = CheckResult(
        "psnr(video)", "psnr", float("inf"), ">=", 0.0, "fail", True, "video",
        settings={"reference": "clip/any/video", "reference_blessed": "2020-01-01T00:00:00"},
    )  # fmt: skip
    f = findings(
        tmp_path,
        {"video": video},
        {"video": dark},
        {"base": [old], "head": [old]},
        references=store,
    )[("video", "psnr")]
    assert f.verdict == "changed" and f.reference is None
    assert "re-blessed" in (f.reason or "") and "checks' frames only" in (f.reason or "")


def test_audio_head_vs_base_is_measured_with_the_recorded_sample_rate(
    tmp_path: Path, store: Path
) -> None:
    _video, audio = clip()
    hiss = audio + np.float32(0.01) * np.cos(np.arange(audio.size) * 1.3).astype(np.float32)
    f = findings(
        tmp_path,
        {"audio": audio},
        {"audio": hiss},
        {"base": [check("audio_snr", "audio", np.inf)], "head": [check("audio_snr", "audio", 34)]},
        references=store,
    )[("audio", "audio_snr")]
    assert f.head_vs_base is not None and 30 < f.head_vs_base < 40, f.reason
    assert f.verdict == "regression" and f.frames == 1 and f.worst_frame is None


def test_nan_in_head_is_a_regression_never_an_improvement(tmp_path: Path, store: Path) -> None:
    _video, audio = clip()
    nan = audio.copy()
    nan[7] = np.nan
    # base's audio off the reference (a finite SNR), head's NaN
    quiet = audio * np.float32(0.9)
    checks = {
        "base": [check("audio_snr", "audio", 20.0)],
        "head": [check("audio_snr", "audio", float("nan"))],
    }
    for refs in (store, None):  # with the reference's files, and on the checks' values alone
        f = findings(tmp_path, {"audio": quiet}, {"audio": nan}, checks, references=refs)
        snr = f[("audio", "audio_snr")]
        assert snr.verdict == "regression", (refs, snr)
    assert "NaN/Inf" in (snr.reason or "")


def test_worse_by_never_lets_nan_improve() -> None:
    nan, inf = float("nan"), float("inf")
    base = np.array([30.0, nan, nan, inf, 30.0, inf, 30.0])
    head = np.array([nan, 30.0, nan, inf, inf, 30.0, 31.0])
    assert list(worse_by(base, head, True)) == [inf, -inf, 0.0, 0.0, -inf, inf, -1.0]
    assert list(worse_by(base, head, False)) == [inf, -inf, 0.0, 0.0, inf, -inf, 1.0]


def fnuz(video: np.ndarray) -> np.ndarray:
    return video & 0xFE  # what the MI300-class path renders (mediarepo.py)


def test_simulated_hip_moving_towards_a_cpu_blessed_reference_is_changed_not_improvement(
    tmp_path: Path, store: Path
) -> None:
    video, _audio = clip()
    base = [attempt(tmp_path, "base", i, {"video": fnuz(video)}, []) for i in range(2)]
    head = [attempt(tmp_path, "head", i, {"video": video}, []) for i in range(2)]
    checks = (check("psnr", "video", 51.0), check("mae", "video", 0.5))
    base = [Attempt(**{**a.__dict__, "platform": "hip", "checks": checks}) for a in base]
    head = [Attempt(**{**a.__dict__, "platform": "hip", "checks": checks}) for a in head]

    def judge(simulated: bool, refs: Path | None = store) -> dict[str, QualityFinding]:
        b = CaseResult("clip", "pipeline", "hip", "passed", simulated=simulated, attempts=base)
        h = CaseResult(
            "clip", "pipeline", "hip", "passed", simulated=simulated, attempts=tuple(head)
        )
        c = judge_case(
            b, h, case=None, latency=[], base_root=tmp_path, head_root=tmp_path, references=refs
        )
        assert c.verdict != "improvement" if simulated else c.verdict == "improvement"
        return {q.metric: q for q in c.quality}

    for q in judge(simulated=True).values():
        assert q.verdict == "changed" and q.foreign_reference, q
        assert q.reference_platform == "cpu" and "blessed on cpu" in (q.reason or "")
        assert "not an improvement" in (q.reason or "")
    # without the store the reference's platform cannot be told: still never an improvement
    assert {q.verdict for q in judge(simulated=True, refs=None).values()} == {"changed"}
    # a real HIP runner judged against the same reference: its own platform's policy
    assert {q.verdict for q in judge(simulated=False).values()} == {"improvement"}


def test_simulated_hip_against_a_reference_blessed_on_hip_keeps_improvements(
    tmp_path: Path,
) -> None:
    video, _audio = clip()
    root = tmp_path / "refs"
    bless(root, {"video": video}, platform="hip", cls="hip")
    checks = [check("psnr", "video", 51.0, cls="hip")]
    b = [
        Attempt(**{**a.__dict__, "platform": "hip"})
        for a in [attempt(tmp_path, "base", 0, {"video": fnuz(video)}, checks)]
    ]
    h = [
        Attempt(**{**a.__dict__, "platform": "hip"})
        for a in [attempt(tmp_path, "head", 0, {"video": video}, checks)]
    ]
    (f,) = quality_findings(
        None, b, h, base_root=tmp_path, head_root=tmp_path, references=root, simulated=True
    )
    assert f.verdict == "improvement" and not f.foreign_reference


def test_identical_hashes_are_no_change_without_reading_a_file(tmp_path: Path) -> None:
    video, _audio = clip()
    a = attempt(tmp_path, "base", 0, {"video": video}, [check("psnr", "video", 40.0)])
    for p in tmp_path.glob("*.safetensors"):
        p.unlink()
    (f,) = quality_findings(None, [a], [a], base_root=tmp_path, head_root=tmp_path)
    assert (f.verdict, f.identical) == ("no_change", True)


def test_an_output_no_check_measures_is_compared_too(tmp_path: Path) -> None:
    video, audio = clip()
    nan = audio.copy()
    nan[3] = np.inf
    b = attempt(tmp_path, "base", 0, {"video": video, "audio": audio}, [])
    h = attempt(tmp_path, "head", 0, {"video": video, "audio": nan}, [])
    f = {
        (q.output, q.metric): q
        for q in quality_findings(None, [b], [h], base_root=tmp_path, head_root=tmp_path)
    }
    assert f[("video", "psnr")].verdict == "no_change"
    assert f[("audio", "audio_snr")].verdict == "regression"
