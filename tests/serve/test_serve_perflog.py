"""``probe.request``: one JSON line per request in ``HARNESS_PERF_LOG``, nothing without it,
and an attempt's recording untouched by a request inside it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from harness import probe


def _lines(folder: Path) -> list[dict[str, object]]:
    return [json.loads(x) for p in sorted(folder.glob("*.jsonl")) for x in p.open()]


def test_without_the_variable_a_request_records_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HARNESS_PERF_LOG", raising=False)
    with probe.request("r1"):
        assert not probe.active()
        with probe.stage("DenoisingStage"):
            pass
    assert list(tmp_path.iterdir()) == []


def test_each_request_is_one_line_with_its_stages_and_fingerprints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    monkeypatch.setenv("HARNESS_PERF_LOG", str(tmp_path / "perf"))
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    for rid in ("a", "b"):
        with probe.request(rid):
            assert probe.active()
            with probe.stage("DenoisingStage"):
                probe.fingerprint("latents", np.arange(4, dtype=np.float32))
            probe.note("serve.tp", 2)
            probe.output("video", np.zeros((1, 2, 2, 3), np.uint8), kind="video")  # not kept
    (path,) = (tmp_path / "perf").iterdir()
    assert path.name == f"perf-rank1-{os.getpid()}.jsonl"
    first, second = _lines(tmp_path / "perf")
    assert (first["request_id"], second["request_id"]) == ("a", "b")
    assert first["rank"] == 1 and first["world_size"] == 2 and first["pid"] == os.getpid()
    assert list(first["stages"]) == ["DenoisingStage"]  # type: ignore[call-overload]
    assert first["fingerprints"]["latents"]["max"] == 3.0  # type: ignore[index]
    assert first["notes"] == {"serve.tp": 2} and first["error"] is None
    assert "outputs" not in first
    assert first["schema"] == "harness.perf/1" and first["started_at"] > 0  # type: ignore[operator]
    assert first["code_file"] == os.path.abspath(__file__)  # who served it: code provenance
    assert not probe.active()


def test_a_failed_request_is_written_with_its_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HARNESS_PERF_LOG", str(tmp_path))
    with (
        pytest.raises(RuntimeError),
        probe.request("boom", rank=0),
        probe.stage("DenoisingStage"),
    ):
        raise RuntimeError("all_reduce timed out")
    (line,) = _lines(tmp_path)
    assert line["error"] == "RuntimeError: all_reduce timed out"
    assert "DenoisingStage" in line["stages"]  # type: ignore[operator]


def test_a_request_inside_an_attempt_leaves_the_attempt_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HARNESS_PERF_LOG", str(tmp_path / "perf"))
    rec = probe._begin(seed=1, platform="cpu", output_dir=None)
    try:
        with probe.stage("Outer"), probe.request("inner", rank=0), probe.stage("DenoisingStage"):
            pass
        probe.note("after", True)
    finally:
        probe._end()
    assert list(rec.stages) == ["Outer"] and rec.notes == {"after": True}
    (line,) = _lines(tmp_path / "perf")
    assert list(line["stages"]) == ["DenoisingStage"]  # type: ignore[call-overload]


def test_tinyav_without_the_harness_has_a_no_op_request(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util
    import sys

    from tinyav_server import TARGET

    monkeypatch.setitem(sys.modules, "harness", None)  # `from harness import probe` fails
    spec = importlib.util.spec_from_file_location("_probe_alone", TARGET / "tinyav" / "_probe.py")
    assert spec is not None and spec.loader is not None
    alone = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(alone)
    assert type(alone.probe).__name__ == "_NoProbe"
    with alone.probe.request("r1", rank=0), alone.probe.stage("DenoisingStage"):
        pass


def test_a_perf_log_that_cannot_be_written_never_fails_the_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("HARNESS_PERF_LOG", str(blocker / "perf"))
    with probe.request("r1", rank=0), probe.stage("DenoisingStage"):
        pass
    assert "harness.probe: cannot append to the perf log" in capsys.readouterr().err
