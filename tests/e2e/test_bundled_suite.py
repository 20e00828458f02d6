"""CI's main job, end to end: the bundled target's case suite through `pytest harness/ -n 2`
(as a CI job runs it), gated by the committed references; and a regression committed into a
scratch copy of the target is caught by those references through `harness run`."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def harness(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


STEPS = 4  # every bundled pipeline case samples four steps


def assert_pipeline_fingerprints(case_id: str, attempt: dict[str, Any]) -> None:
    """The stages' tensors, in order, each finite and recorded where it lived (the CPU here)."""
    fps = attempt["fingerprints"]
    steps = [
        n for i in range(STEPS) for n in (f"denoise.step{i:02d}", f"denoise.step{i:02d}.audio")
    ]
    assert list(fps) == [
        "text.context",
        "latents.video.init",
        "latents.audio.init",
        *steps,
        "video.frames",
        "audio.pcm",
    ], case_id
    for name, fp in fps.items():
        assert fp["nonfinite"] == 0, (case_id, name)
        assert fp["device"] == "cpu", (case_id, name)
        assert fp["hash"].startswith(("blake3:", "sha256:")), (case_id, name)
        assert None not in (fp["min"], fp["max"], fp["mean"]), (case_id, name)
        want = "uint8" if name == "video.frames" else "float32"
        assert fp["dtype"] == want, (case_id, name, fp["dtype"])
    video, audio = fps["latents.video.init"], fps["latents.audio.init"]
    assert len(video["shape"]) == 5 and len(audio["shape"]) == 3, case_id
    for i in range(STEPS):  # the sampler keeps the latents' shapes
        assert fps[f"denoise.step{i:02d}"]["shape"] == video["shape"], case_id
        assert fps[f"denoise.step{i:02d}.audio"]["shape"] == audio["shape"], case_id
    # The decoded frames and PCM are what was output.
    assert fps["video.frames"]["shape"] == attempt["outputs"]["video"]["shape"], case_id
    assert fps["audio.pcm"]["shape"] == attempt["outputs"]["audio"]["shape"], case_id
    assert fps["video.frames"]["hash"] == attempt["outputs"]["video"]["hash"], case_id
    for name, out in attempt["outputs"].items():  # the MP4 too: decoded and counted
        assert out["nonfinite"] == 0, (case_id, name)


@pytest.mark.xdist_group("bundled-suite")
def test_whole_suite_passes_on_cpu_and_never_writes_references(bundled_suite: Any) -> None:
    # bundled_suite (tests/conftest.py): `pytest harness/ -n 2 -q --harness-out OUT` in this
    # checkout, run once for this test and the others of the bundled-suite group
    proc = bundled_suite
    assert proc.returncode == 0, proc.output[-4000:]
    assert proc.references_after == proc.references_before
    doc = json.loads((proc.dir / "report.json").read_text())
    cases = doc["cases"]
    assert len(cases) >= 40
    assert {c["kind"] for c in cases} == {"loader", "quant", "import", "pipeline", "server"}
    # Every case passes; the diffusers cases are skipped (with why) only where diffusers is not
    # installed, as on a machine installed without the extra.
    without = importlib.util.find_spec("diffusers") is None
    for c in cases:
        skip_ok = without and c["status"] == "skipped" and "requires 'diffusers'" in c["reason"]
        assert c["status"] == "passed" or skip_ok, (c["id"], c["status"], c["reason"])
    # one pytest item per case, its outcome the case's, and the run folder named at the end
    passed = sum(c["status"] == "passed" for c in cases)
    assert re.search(rf"^{passed} passed\b", proc.output.splitlines()[-1]), proc.output[-2000:]
    assert f"harness report: {proc.dir.resolve() / 'report.json'}" in proc.output
    # the xdist workers' parts, merged: the run folder lists the part folders written beside
    # it, each case comes from exactly one part, and every planned case has its result
    parts = sorted(d for d in proc.dir.resolve().parent.iterdir() if "-gw" in d.name)
    assert sorted(Path(m["path"]).name for m in doc["merged_from"]) == [d.name for d in parts]
    from_parts = [
        c["id"] for d in parts for c in json.loads((d / "report.json").read_text())["cases"]
    ]
    assert sorted(from_parts) == sorted(c["id"] for c in cases)
    assert sorted(p["id"] for p in doc["shard"]["plan"]) == sorted(c["id"] for c in cases)
    assert "missing" not in doc, doc["missing"]
    # tinyav's pipeline cases (cases/diffusers/ has its own tests, in tests/diffusers/)
    pipeline = [
        c for c in cases if c["kind"] == "pipeline" and Path(c["source"]).parent.name == "pipeline"
    ]
    assert len(pipeline) == 8
    for case in pipeline:
        checks = {k["name"]: k for k in case["checks"]}
        assert checks["ssim(video)"]["passed"] is True, case["id"]
        assert checks["ssim(video)"]["settings"]["sigma"] == 1.5
        assert checks["audio_snr(audio)"]["passed"] is True, case["id"]
        assert checks["identical_outputs"]["value"] is True
        attempt = case["attempts"][0]
        assert "DenoisingStage" in attempt["stages"]
        assert_pipeline_fingerprints(case["id"], attempt)
    # The CLIP check has no model here: reported as not run with its reason, never passed.
    clip = next(k for c in pipeline for k in c["checks"] if k["metric"] == "clip")
    assert clip["passed"] is None and "HARNESS_CLIP_MODEL" in clip["reason"]
    assert "HarnessCheckNotRunWarning" in proc.output
    assert "check clip(video) not run: no CLIP model configured" in proc.output
    assert harness("refs", "verify").returncode == 0


def test_regression_in_a_scratch_copy_is_caught_by_the_references(tmp_path: Path) -> None:
    scratch = tmp_path / "tinyav"
    shutil.copytree(
        REPO / "targets" / "tinyav", scratch, ignore=shutil.ignore_patterns("__pycache__")
    )
    pipeline = scratch / "tinyav" / "pipeline.py"
    src = pipeline.read_text()
    needle = "frames = self.companions.video_decoder(video.to(torch.float32).cpu())[0].numpy()"
    assert needle in src
    # A "harmless" brightness tweak in the video decoder output: +6 on every pixel.
    pipeline.write_text(
        src.replace(
            needle,
            needle + "\n            frames = (frames.astype('int16') + 6).clip(0, 255)"
            ".astype('uint8')",
        )
    )
    proc = harness(
        "run",
        "cases/pipeline",
        "-k",
        "t2va-int8 and not pruned",
        "--code-root",
        str(scratch),
        "--out",
        str(tmp_path / "runs"),
        "--run-id",
        "r",
        "-q",
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    doc = json.loads((tmp_path / "runs" / "r" / "report.json").read_text())
    (case,) = doc["cases"]
    checks = {k["name"]: k for k in case["checks"]}
    assert checks["mae(video)"]["passed"] is False
    assert checks["mae(video)"]["value"] > 4
    assert checks["psnr(video)"]["passed"] is False
    assert checks["audio_snr(audio)"]["passed"] is True  # audio untouched: only video diverged
    rows = checks["mae(video)"]["details"]
    assert len(rows) == 16 and all("obtained" in r for r in rows)
    junit = (tmp_path / "runs" / "r" / "junit.xml").read_text()
    assert "mae(video): FAILED" in junit
