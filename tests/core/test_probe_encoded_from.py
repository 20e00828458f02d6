"""The NaN/Inf count of a media file encoded from arrays the probe already holds is theirs; the
file is only demuxed. Where no such array was recorded, the file is decoded as before."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from harness import media, probe
from harness.checks.finite import finiteness_checks
from harness.probe import content


def _mp4(path: Path, with_audio: bool = True) -> tuple[Path, np.ndarray, np.ndarray]:
    frames = np.random.default_rng(0).random((5, 16, 16, 3), dtype=np.float32)
    pcm = (np.sin(np.linspace(0, 80, 3200, dtype=np.float32)) * 0.1).reshape(1, -1)
    u8 = (frames * 255).astype(np.uint8)
    media.write_mp4(path, u8, pcm if with_audio else None, fps=8, sample_rate=16_000)
    return path, frames, pcm


def test_mp4_takes_the_count_of_the_arrays_it_was_encoded_from(rec: Any, tmp_path: Path) -> None:
    path, frames, pcm = _mp4(tmp_path / "clip.mp4")
    frames[0, 0, 0, :2] = np.nan  # NaN the 8-bit MP4 cannot carry; its source array does
    probe.output("video", frames, kind="video")
    probe.output("audio", pcm, kind="audio")
    probe.output("mp4", path, kind="file", encoded_from=("video", "audio"))
    entry = rec.outputs["mp4"]
    assert entry["nonfinite"] == 2 and entry["nonfinite_from"] == ["video", "audio"]
    assert "corrupt" not in entry
    checks = {c.name: c for c in finiteness_checks(rec.outputs)}
    assert checks["finite(mp4)"].passed is False
    assert "'mp4' contains 2 NaN/Inf" in (checks["finite(mp4)"].reason or "")


def test_mp4_from_finite_arrays_passes(rec: Any, tmp_path: Path) -> None:
    path, frames, _ = _mp4(tmp_path / "clip.mp4", with_audio=False)
    probe.output("video", frames, kind="video")
    probe.output("mp4", path, kind="file", encoded_from="video")
    assert rec.outputs["mp4"]["nonfinite"] == 0
    assert rec.outputs["mp4"]["nonfinite_from"] == ["video"]
    assert all(c.passed for c in finiteness_checks(rec.outputs))


@pytest.mark.parametrize("encoded_from", [(), ("video",), ("video", "prompt")])
def test_mp4_without_a_recorded_source_array_is_decoded(
    rec: Any, tmp_path: Path, encoded_from: tuple[str, ...]
) -> None:
    path, frames, _ = _mp4(tmp_path / "clip.mp4")
    if encoded_from:  # "video" recorded as a file, "prompt" not at all: no array to count
        np.save(tmp_path / "video.npy", frames)
        probe.output("video", tmp_path / "video.npy")
    probe.output("mp4", path, kind="file", encoded_from=encoded_from)
    entry = rec.outputs["mp4"]
    assert "nonfinite_from" not in entry
    assert entry["nonfinite"] == 0 and "corrupt" not in entry  # decoded: frames and PCM


@pytest.mark.parametrize("encoded_from", [(), ("video",)])
def test_broken_mp4_fails_whether_decoded_or_only_demuxed(
    rec: Any, tmp_path: Path, encoded_from: tuple[str, ...]
) -> None:
    path, frames, _ = _mp4(tmp_path / "clip.mp4")
    path.write_bytes(b"\x00\x00\x00\x18ftypmp42" + b"\x00" * 64)  # a header, then nothing
    probe.output("video", frames, kind="video")
    probe.output("mp4", path, kind="file", encoded_from=encoded_from)
    entry = rec.outputs["mp4"]
    assert entry["nonfinite"] is None and entry["corrupt"] is True
    assert ("nonfinite_from" in entry) == bool(encoded_from)  # demuxed, not decoded
    assert str(rec.output_dir / "mp4.mp4") in entry["nonfinite_reason"]
    check = next(c for c in finiteness_checks(rec.outputs) if c.name == "finite(mp4)")
    assert check.passed is False and (check.reason or "").startswith("output 'mp4' is broken")


def test_a_media_file_in_another_container_than_its_suffix_says_still_demuxes(
    rec: Any, tmp_path: Path
) -> None:
    # The demuxer is picked from the suffix to skip probing; a Matroska file named .mp4 is
    # opened again with probing, so a misnamed but valid file is never called broken.
    import av

    frames = (np.random.default_rng(1).random((4, 16, 16, 3)) * 255).astype(np.uint8)
    misnamed = tmp_path / "clip.mp4"
    with av.open(str(misnamed), mode="w", format="matroska") as out:
        stream = out.add_stream("mpeg4", rate=8)
        stream.width, stream.height, stream.pix_fmt = 16, 16, "yuv420p"
        for frame in frames:
            out.mux(stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")))
        out.mux(stream.encode(None))
    assert misnamed.read_bytes()[:4] == b"\x1a\x45\xdf\xa3"  # EBML: Matroska, not MP4
    assert content._demux(misnamed, "mp4") is not None  # the suffix's demuxer refuses it
    probe.output("video", frames, kind="video")
    probe.output("mp4", misnamed, kind="file", encoded_from="video")
    entry = rec.outputs["mp4"]
    assert entry["nonfinite"] == 0 and "corrupt" not in entry, entry
    assert entry["nonfinite_from"] == ["video"]


def test_an_mp4_the_harness_muxed_is_not_demuxed_again_until_it_changes(
    rec: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, frames, pcm = _mp4(tmp_path / "clip.mp4")
    video_only, _, _ = _mp4(tmp_path / "video.mp4", with_audio=False)
    packets = media.muxed_packets(path)
    assert packets is not None and len(packets) == 2 and min(packets) > 0
    assert media.muxed_packets(video_only) == (5,)  # one packet per frame, no B-frames
    copy = tmp_path / "copy.mp4"
    copy.write_bytes(path.read_bytes())
    assert media.muxed_packets(copy) is None  # not a file write_mp4 wrote

    demuxed: list[Path] = []
    real = content._demux
    monkeypatch.setattr(content, "_demux", lambda p, d: demuxed.append(p) or real(p, d))
    probe.output("video", frames, kind="video")
    probe.output("audio", pcm, kind="audio")
    probe.output("mp4", path, kind="file", encoded_from=("video", "audio"))
    assert demuxed == [] and rec.outputs["mp4"]["nonfinite"] == 0
    assert rec.outputs["mp4"]["nonfinite_from"] == ["video", "audio"]

    path.write_bytes(path.read_bytes()[:200])  # changed since written: demuxed, and broken
    assert media.muxed_packets(path) is None
    probe.output("mp4-cut", path, kind="file", encoded_from=("video", "audio"))
    assert set(demuxed) == {rec.output_dir / "mp4-cut.mp4"}  # with the suffix's demuxer, then any
    entry = rec.outputs["mp4-cut"]
    assert entry["nonfinite"] is None and entry["corrupt"] is True
