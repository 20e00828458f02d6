"""`harness compare` end to end on planted quality changes of a tiny target (9 frames of
32x32, 0.2 s of audio; see mediarepo.py): every frame of every output is compared, head
against base and each side against the reference, audio with its sample rate.

Each planted head passed through the comparison before this was built: the blackout as
``no_change``, the audio change without a head-vs-base size ("needs the sample rate"), the FP8
flavour on simulated HIP as an improvement. NaN in head's audio (``changed`` before, an
improvement where base's value was finite) is tested on real files in test_quality.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from mediarepo import CASE, REPO, harness, make_media_repo

from harness.model import Comparison
from harness.report.schema import validate_comparison

# the media repository (`media`): built once, on one xdist worker
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("compare-quality-e2e")]


@pytest.fixture(scope="module")
def media(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return make_media_repo(tmp_path_factory.mktemp("quality-e2e"))


def compare(media: dict[str, Any], head: str, *extra: str) -> tuple[int, dict[str, Any], str]:
    proc = harness(
        media["work"], "compare", "cases", "--base", "base", "--head", head,
        "--repo", str(media["repo"]), "--code-root", "src",
        "--references", str(media["store"]), "--runner", str(REPO / "runners" / "cpu.toml"),
        "--noise-dir", str(media["runs"] / "noise"), "--out", str(media["runs"]),
        "--id", head, "--rounds", "2", "-q", "--reuse-workers", "--no-coverage", *extra,  # quality
    )  # fmt: skip
    path = media["runs"] / head / "comparison.json"
    assert path.is_file(), proc.stderr[-4000:]
    doc = json.loads(path.read_text())
    validate_comparison(doc)
    assert Comparison.from_json(doc).to_json() == doc
    return proc.returncode, doc, proc.stderr


def case(doc: dict[str, Any], name: str = CASE) -> dict[str, Any]:
    found = {f"{c['kind']}/{c['id']}[{c['platform']}]": c for c in doc["cases"]}
    assert name in found, sorted(found)
    return found[name]


def quality(c: dict[str, Any], metric: str, output: str) -> dict[str, Any]:
    return next(q for q in c["quality"] if q["metric"] == metric and q["output"] == output)


def head_checks_passed(media: dict[str, Any], head: str) -> bool:
    report = json.loads((media["runs"] / head / "head" / "report.json").read_text())
    (result,) = report["cases"]
    return bool(result["status"] == "passed")


def test_a_head_that_blacks_out_the_unchecked_middle_frames_is_a_regression(media: Any) -> None:
    code, doc, err = compare(media, "blackout")
    assert head_checks_passed(media, "blackout")  # frames 0, 4 and 8 are intact
    c = case(doc)
    assert c["failures"]["verdict"] == "no_change"
    psnr = quality(c, "psnr", "video")
    assert psnr["verdict"] == "regression", psnr
    assert psnr["frames"] == 9 and psnr["worst_frame"] in (1, 2, 3, 5, 6, 7)
    assert psnr["reference"] == "clip/any/video" and psnr["reference_platform"] == "cpu"
    assert psnr["base_vs_ref"] == "inf" and psnr["head_vs_ref"] < 10
    assert f"frame {psnr['worst_frame']} of 9" in psnr["reason"]
    assert quality(c, "mae", "video")["verdict"] == "regression"
    assert quality(c, "audio_snr", "audio")["verdict"] == "no_change"
    assert c["quality_verdict"] == "regression" and c["verdict"] == "regression"
    assert code == 1, err[-2000:]


def test_an_audio_change_is_measured_head_against_base_with_its_sample_rate(media: Any) -> None:
    code, doc, err = compare(media, "audio-hiss")
    assert head_checks_passed(media, "audio-hiss")
    c = case(doc)
    snr = quality(c, "audio_snr", "audio")
    assert snr["verdict"] == "regression", snr
    assert isinstance(snr["head_vs_base"], float) and 30 < snr["head_vs_base"] < 40
    assert "could not be computed" not in snr["reason"]
    assert snr["frames"] == 1 and snr["reference"] == "clip/any/audio"
    assert quality(c, "psnr", "video")["verdict"] == "no_change"
    assert c["verdict"] == "regression"
    assert code == 1, err[-2000:]


def test_simulated_hip_a_change_towards_the_cpu_blessed_reference_is_not_an_improvement(
    media: Any,
) -> None:
    code, doc, err = compare(media, "fp8-flavour", "--platform", "hip")
    c = case(doc, "pipeline/clip[hip]")
    for metric in ("psnr", "mae"):
        q = quality(c, metric, "video")
        assert q["foreign_reference"] is True, q
        assert q["verdict"] == "changed", q
        assert q["reference"] == "clip/any/video" and q["reference_platform"] == "cpu"
        assert "blessed on cpu" in q["reason"] and "not an improvement" in q["reason"]
    psnr = quality(c, "psnr", "video")
    assert 45 < psnr["base_vs_ref"] < 60 and psnr["head_vs_ref"] == "inf"  # head is the CPU's
    assert c["quality_verdict"] == "no_change"
    assert c["verdict"] != "improvement"
    assert code == 0, err[-2000:]
