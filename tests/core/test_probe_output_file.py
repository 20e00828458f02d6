"""``probe.output_file``: the target writes an output file where the run keeps it, and the probe
records it there (hashed in place, not copied); outside an attempt the same code writes to a
temporary folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from harness import media, probe
from harness.checks.finite import finiteness_checks
from harness.probe import content


def _frames() -> np.ndarray:
    return np.random.default_rng(0).integers(0, 255, (5, 16, 16, 3), dtype=np.uint8)


def test_the_file_is_written_into_the_run_and_recorded_where_it_lies(
    rec: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    copies: list[Path | None] = []
    real = content.copy_hashed
    monkeypatch.setattr(
        "harness.probe.outputs.copy_hashed",
        lambda s, d: copies.append(d if d != s else None) or real(s, d),
    )
    frames = _frames()
    probe.output("video", frames, kind="video")
    with probe.output_file("mp4", ".mp4", kind="file", encoded_from="video") as path:
        assert path == rec.output_dir / "mp4.mp4"
        media.write_mp4(path, frames, fps=8)
    entry = rec.outputs["mp4"]
    assert copies == [None]  # hashed where it lies: no second file was written
    assert Path(entry["path"]) == path and sorted(p.name for p in rec.output_dir.iterdir()) == [
        "mp4.mp4",
        "video.safetensors",
    ]
    assert entry["hash"] == probe.hash_input(path.read_bytes())
    assert entry["bytes"] == path.stat().st_size
    assert entry["nonfinite"] == 0 and entry["nonfinite_from"] == ["video"]
    assert entry["kind"] == "file"
    assert all(c.passed for c in finiteness_checks(rec.outputs))


def test_it_records_what_output_records_for_the_same_file(rec: Any, tmp_path: Path) -> None:
    src = tmp_path / "clip.mp4"
    media.write_mp4(src, _frames(), fps=8)
    probe.output("copied", src, kind="file")
    with probe.output_file("written", ".mp4", kind="file") as path:
        path.write_bytes(src.read_bytes())  # not muxed by the harness here: decoded as usual
    a, b = rec.outputs["copied"], rec.outputs["written"]
    assert {k: v for k, v in a.items() if k != "path"} == {
        k: v for k, v in b.items() if k != "path"
    }


def test_a_block_that_raises_records_nothing_and_leaves_no_file(rec: Any) -> None:
    with (
        pytest.raises(RuntimeError, match="encoder died"),
        probe.output_file("mp4", ".mp4") as path,
    ):
        path.write_bytes(b"half a file")
        raise RuntimeError("encoder died")
    assert "mp4" not in rec.outputs and not path.exists()


def test_a_block_that_writes_nothing_is_an_error_naming_the_output(rec: Any) -> None:
    with (
        pytest.raises(FileNotFoundError, match=r"output_file\('mp4', '.mp4'\): the block wrote"),
        probe.output_file("mp4", ".mp4"),
    ):
        pass
    assert "mp4" not in rec.outputs


def test_a_taken_name_is_refused_before_the_block_can_overwrite_its_file(rec: Any) -> None:
    with probe.output_file("clip", ".bin") as path:
        path.write_bytes(b"first")
    with (
        pytest.raises(ValueError, match="'clip' was already recorded"),
        probe.output_file("clip", ".bin"),
    ):
        raise AssertionError("the block must not run")
    assert path.read_bytes() == b"first"
    assert rec.outputs["clip"]["hash"] == probe.hash_input(b"first")


@pytest.mark.parametrize("suffix", ["mp4", ".tar.gz", "", ".", "./x"])
def test_a_suffix_that_is_not_one_dotted_suffix_is_refused(suffix: str) -> None:
    with pytest.raises(ValueError, match="one file suffix with its dot"):
        probe.output_file("mp4", suffix)


def test_outside_an_attempt_it_is_a_temporary_file_removed_after_the_block() -> None:
    assert not probe.active()
    with probe.output_file("mp4", ".mp4") as path:
        assert path.parent.is_dir() and path.suffix == ".mp4"
        media.write_mp4(path, _frames(), fps=8)
        assert path.stat().st_size > 0
    assert not path.exists() and not path.parent.exists()


def test_without_an_output_folder_it_is_hashed_and_counted_and_keeps_no_path() -> None:
    rec = probe._begin(seed=0, platform="cpu", output_dir=None)
    try:
        with probe.output_file("blob", ".bin") as path:
            path.write_bytes(b"\x00" * 10)
    finally:
        probe._end()
    entry = rec.outputs["blob"]
    assert not path.exists() and "path" not in entry
    assert entry["hash"] == probe.hash_input(b"\x00" * 10) and entry["bytes"] == 10
