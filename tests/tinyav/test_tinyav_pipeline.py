"""Pipeline: determinism, stages/fingerprints/outputs through the probe, atomic readable MP4."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest
from tinyav import media
from tinyav.checkpoint import write_checkpoint
from tinyav.errors import ExportError
from tinyav.pipeline import Pipeline, Request
from tinyav.scenarios import pipeline as pipeline_scenarios

from harness import probe

STAGES = [
    "InputValidationStage",
    "TextEncodingStage",
    "LatentPreparationStage",
    "DenoisingStage",
    "VideoDecodingStage",
    "AudioDecodingStage",
    "ExportStage",
]


@pytest.fixture(scope="module")
def int8_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_checkpoint(tmp_path_factory.mktemp("ckpt") / "dit.safetensors", "int8_convrot")


def _digest(*arrays: np.ndarray) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def test_two_runs_identical(int8_ckpt: Path, tmp_path: Path) -> None:
    a = Pipeline.from_checkpoint(int8_ckpt)(Request("a fox", seed=5), tmp_path / "a.mp4")
    b = Pipeline.from_checkpoint(int8_ckpt)(Request("a fox", seed=5), tmp_path / "b.mp4")
    c = Pipeline.from_checkpoint(int8_ckpt)(Request("a fox", seed=6), tmp_path / "c.mp4")
    assert _digest(a.frames, a.pcm) == _digest(b.frames, b.pcm) != _digest(c.frames, c.pcm)
    assert a.mp4 is not None and b.mp4 is not None
    assert a.mp4.read_bytes() == b.mp4.read_bytes()


def test_prompt_matters(int8_ckpt: Path) -> None:
    pipe = Pipeline.from_checkpoint(int8_ckpt)
    a = pipe(Request("a fox", seed=5))
    b = pipe(Request("a whale", seed=5))
    assert _digest(a.frames) != _digest(b.frames)
    assert a.mp4 is None


def test_probe_records_stages_fingerprints_outputs(recorder: Any, tmp_path: Path) -> None:
    pipeline_scenarios.t2va(quant="int8", steps=3, workdir=str(tmp_path))
    names = list(recorder.stages)
    assert [n for n in names if n in STAGES] == STAGES
    assert [n for n in names if n.startswith("DenoisingStage.step")] == [
        "DenoisingStage.step00",
        "DenoisingStage.step01",
        "DenoisingStage.step02",
    ]
    fps = recorder.fingerprints
    assert "latents.video.init" in fps and "denoise.step02" in fps and "denoise.step02.audio" in fps
    assert all(fp["nonfinite"] == 0 for fp in fps.values())
    assert recorder.outputs["video"]["shape"] == [16, 64, 64, 3]
    assert recorder.outputs["audio"]["shape"] == [32000]
    assert recorder.outputs["mp4"]["bytes"] > 0
    assert recorder.notes["dispatch.int8_mm.plan"] == "dequant_matmul"
    assert recorder.notes["dispatch.residual_gate.plan"] == "eager"
    assert recorder.notes["dispatch.int8_mm.ran"] == "dequant_matmul"
    assert recorder.notes["dispatch.residual_gate.ran"] == "eager"
    assert recorder.notes["device.ran"] == "cpu"
    assert "checkpoint" in recorder.inputs


def test_seed_comes_from_probe(recorder: Any, tmp_path: Path) -> None:
    pipeline_scenarios.t2va(quant="bf16", steps=1, seed=999, workdir=str(tmp_path / "a"))
    first = recorder.fingerprints["latents.video.init"]["hash"]
    # A second attempt (each output name is recorded once per attempt), with another seed.
    second = probe._begin(seed=8, platform="cpu", output_dir=tmp_path / "probe-out-b")
    pipeline_scenarios.t2va(quant="bf16", steps=1, seed=999, workdir=str(tmp_path / "b"))
    assert second.fingerprints["latents.video.init"]["hash"] != first


@pytest.mark.parametrize("quant", ["bf16", "fp8"])
def test_ref2va_records_reference_inputs(recorder: Any, tmp_path: Path, quant: str) -> None:
    pipeline_scenarios.ref2va(quant=quant, steps=2, workdir=str(tmp_path))
    assert {"reference_video", "reference_audio"} <= set(recorder.inputs)
    assert (tmp_path / "reference.mp4").is_file() and (tmp_path / "reference.wav").is_file()
    assert recorder.notes["pipeline.mode"] == "ref2va"


def test_reference_changes_output(int8_ckpt: Path, tmp_path: Path) -> None:
    frames, pcm = media.synthetic_reference(3)
    rv = media.write_mp4(tmp_path / "r.mp4", frames, None)
    ra = media.write_wav(tmp_path / "r.wav", pcm)
    pipe = Pipeline.from_checkpoint(int8_ckpt)
    plain = pipe(Request("a fox", seed=1))
    ref = pipe(Request("a fox", seed=1, reference_video=str(rv), reference_audio=str(ra)))
    assert _digest(plain.frames) != _digest(ref.frames)


def test_fnuz_pipeline_close_to_fn(tmp_path: Path) -> None:
    ckpt = write_checkpoint(tmp_path / "f.safetensors", "fp8")
    fn = Pipeline.from_checkpoint(ckpt)(Request("a fox", seed=1))
    fnuz = Pipeline.from_checkpoint(ckpt, fp8_platform="hip")(Request("a fox", seed=1))
    assert np.isfinite(fnuz.pcm).all()
    assert np.abs(fn.frames.astype(int) - fnuz.frames.astype(int)).mean() < 2.0


def test_invalid_request(int8_ckpt: Path) -> None:
    pipe = Pipeline.from_checkpoint(int8_ckpt)
    with pytest.raises(ValueError, match="num_frames=6"):
        pipe(Request("x", num_frames=6))
    with pytest.raises(ValueError, match="together"):
        pipe(Request("x", reference_video="a.mp4"))


def test_mp4_readable_with_audio(tmp_path: Path) -> None:
    frames, pcm = media.synthetic_reference(0, frames=12, fps=6)
    out = media.write_mp4(tmp_path / "clip.mp4", frames, pcm, fps=6)
    with av.open(str(out)) as c:
        assert len(c.streams.video) == 1 and len(c.streams.audio) == 1
        assert c.streams.audio[0].codec_context.name == "aac"
        assert c.streams.audio[0].rate == 16000
    assert media.decode_video(out).shape == (12, 64, 64, 3)
    decoded = media.decode_audio(out)
    assert decoded.size >= pcm.size
    assert [p.name for p in tmp_path.iterdir()] == ["clip.mp4"]  # no partial file left


def test_mp4_never_partial_under_final_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    frames, pcm = media.synthetic_reference(0)
    final = tmp_path / "out.mp4"
    final.write_bytes(b"previous complete file")
    seen: list[list[str]] = []
    real_replace = os.replace

    def spy(src: Any, dst: Any) -> None:
        seen.append(sorted(p.name for p in tmp_path.iterdir()))
        assert final.read_bytes() == b"previous complete file"  # untouched while encoding
        real_replace(src, dst)

    monkeypatch.setattr(media.os, "replace", spy)
    media.write_mp4(final, frames, pcm)
    assert len(seen) == 1 and any(".partial" in n for n in seen[0])
    assert media.decode_video(final).shape[0] == 16


def test_nonfinite_audio_refused_and_nothing_left(tmp_path: Path) -> None:
    frames, pcm = media.synthetic_reference(0)
    pcm[100] = np.nan
    with pytest.raises(ExportError, match="non-finite"):
        media.write_mp4(tmp_path / "bad.mp4", frames, pcm)
    assert list(tmp_path.iterdir()) == []


def test_odd_frame_size_refused(tmp_path: Path) -> None:
    frames, _ = media.synthetic_reference(0)
    with pytest.raises(ExportError, match="even"):
        media.write_mp4(tmp_path / "odd.mp4", frames[:, :63], None)
    assert list(tmp_path.iterdir()) == []


def test_encoder_failure_mid_stream_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    frames, pcm = media.synthetic_reference(0)
    real = av.VideoFrame.from_ndarray
    calls = {"n": 0}

    def flaky(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 5:
            raise RuntimeError("encoder exploded")
        return real(*args, **kwargs)

    monkeypatch.setattr(media.av.VideoFrame, "from_ndarray", flaky)
    with pytest.raises(ExportError, match="encoder exploded"):
        media.write_mp4(tmp_path / "x.mp4", frames, pcm)
    assert list(tmp_path.iterdir()) == []
