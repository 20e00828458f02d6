"""``python -m tinyav.serve`` end to end: a real server process at TP 1 and at TP 2 (two gloo
ranks), one small request each over HTTP, its MP4 decoded with PyAV, the per-request perf log
read back, and SIGTERM ending every process.

Tolerance of TP 2 against TP 1 (tests/serve/test_serve_tp.py measured the raw outputs: latents
within 3e-6, raw frames within one level, PSNR 92 dB): the decoded MP4 frames must reach a
PSNR of 40 dB with no pixel more than 16 levels apart, and the denoised latents' perf-log
fingerprints (min, max, mean) must agree within 1e-4. Never bit-exactness: the all_reduce
sums in another order. On an AVX-512 runner (2026-12-04) the MP4s differed by up to 35 levels,
as two TP 1 servers' did, until harness.media.mp4_video_options held libx264 to AVX2: its
AVX-512 code wrote other bytes for the same frames in each process
(tests/metrics/test_mp4_determinism.py); since, TP 1 and TP 2 decode to the same frames there.
"""

from __future__ import annotations

import base64
import io
import json
import math
import os
import wave
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tinyav_server import Server, start_server

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("tinyav-serve")]

BODY = {"prompt": "a red fox", "seed": 5, "steps": 2, "num_frames": 8, "height": 32, "width": 32}


@dataclass(frozen=True)
class Served:
    """One server's life: its answer to one request, its perf log, how it ended."""

    tp: int
    answer: dict[str, Any]
    perf: list[dict[str, Any]]
    perf_files: list[str]
    bad: dict[str, tuple[int, Any]]
    exit_code: int
    log: str


def _serve_once(tp: int, folder: Path) -> Served:
    import httpx

    server: Server = start_server(tp, folder)
    try:
        url = f"{server.url}/v1/videos/generations"
        answer = httpx.post(url, json={**BODY, "request_id": f"fox-tp{tp}"}, timeout=120)
        assert answer.status_code == 200, answer.text
        bad = {}
        for name, body in {
            "frames": {**BODY, "num_frames": 7},
            "unknown": {**BODY, "colour": "red"},
            "type": {**BODY, "steps": "two"},
        }.items():
            r = httpx.post(url, json=body, timeout=60)
            bad[name] = (r.status_code, r.json())
        code = server.terminate()
    finally:
        server.kill()
    perf_dir = folder / "perf"
    files = sorted(p.name for p in perf_dir.glob("*.jsonl"))
    lines = [json.loads(x) for p in sorted(perf_dir.glob("*.jsonl")) for x in p.open()]
    return Served(tp, answer.json(), lines, files, bad, code, server.log_text())


@pytest.fixture(scope="module")
def tp1(tmp_path_factory: pytest.TempPathFactory) -> Served:
    return _serve_once(1, tmp_path_factory.mktemp("serve-tp1"))


@pytest.fixture(scope="module")
def tp2(tmp_path_factory: pytest.TempPathFactory) -> Served:
    return _serve_once(2, tmp_path_factory.mktemp("serve-tp2"))


def _frames(answer: dict[str, Any]) -> np.ndarray:
    import av

    data = base64.b64decode(answer["video"]["b64"])
    with av.open(io.BytesIO(data)) as container:
        return np.stack([f.to_ndarray(format="rgb24") for f in container.decode(video=0)])


def _psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return math.inf if mse == 0 else 10 * math.log10(255.0**2 / mse)


def _pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_tp1_answers_with_the_mp4_and_audio_it_was_asked_for(tp1: Served) -> None:
    a = tp1.answer
    assert a["request_id"] == "fox-tp1" and a["tp"] == 1
    frames = _frames(a)
    assert frames.shape == (8, 32, 32, 3)
    assert (a["video"]["num_frames"], a["video"]["height"], a["video"]["width"]) == (8, 32, 32)
    with wave.open(io.BytesIO(base64.b64decode(a["audio"]["b64"]))) as w:
        assert (w.getframerate(), w.getsampwidth(), w.getnchannels()) == (16_000, 2, 1)
        assert w.getnframes() == a["audio"]["num_samples"] == 16_000  # 8 frames at 8 fps


def test_tp1_bad_bodies_get_400_or_422_naming_the_problem(tp1: Served) -> None:
    status, body = tp1.bad["frames"]
    assert status == 400 and "num_frames=7 must be a positive multiple of 4" in body["detail"]
    status, body = tp1.bad["unknown"]
    assert status == 422 and body["detail"][0]["loc"] == ["body", "colour"]
    status, body = tp1.bad["type"]
    assert status == 422 and body["detail"][0]["loc"] == ["body", "steps"]


def test_tp1_perf_log_has_one_line_for_the_request(tp1: Served) -> None:
    assert len(tp1.perf_files) == 1 and tp1.perf_files[0].startswith("perf-rank0-")
    (line,) = tp1.perf  # bad requests never reach the pipeline: no line
    assert line["request_id"] == "fox-tp1" and line["rank"] == 0 and line["error"] is None
    assert line["stages"]["DenoisingStage"] > 0
    assert "denoise.step01" in line["fingerprints"] and line["notes"]["serve.tp"] == 1


def test_tp1_logs_readiness_and_exits_cleanly_on_sigterm(tp1: Served) -> None:
    assert "tinyav.serve ready on http://127.0.0.1:" in tp1.log and "(tp=1)" in tp1.log
    assert tp1.exit_code == 0, tp1.log[-2000:]


def test_tp2_every_rank_logs_the_request(tp2: Served) -> None:
    assert tp2.answer["request_id"] == "fox-tp2" and tp2.answer["tp"] == 2
    by_rank = {line["rank"]: line for line in tp2.perf}
    assert sorted(by_rank) == [0, 1] and len(tp2.perf) == 2, tp2.perf_files
    for rank, line in by_rank.items():
        assert line["request_id"] == "fox-tp2" and line["world_size"] == 2
        assert line["stages"]["DenoisingStage"] > 0, rank
        assert tp2.perf_files[rank] == f"perf-rank{rank}-{line['pid']}.jsonl"


def test_tp2_matches_tp1_within_the_measured_tolerance(tp1: Served, tp2: Served) -> None:
    a, b = _frames(tp1.answer), _frames(tp2.answer)
    assert a.shape == b.shape == (8, 32, 32, 3)
    assert int(np.abs(a.astype(int) - b).max()) <= 16
    assert _psnr(a, b) >= 40.0
    (one,) = tp1.perf
    for line in tp2.perf:
        for key in ("min", "max", "mean"):
            want = one["fingerprints"]["denoise.step01"][key]
            assert line["fingerprints"]["denoise.step01"][key] == pytest.approx(want, abs=1e-4)


def test_tp2_sigterm_stops_every_rank(tp2: Served) -> None:
    assert tp2.exit_code == 0, tp2.log[-2000:]
    assert "(tp=2)" in tp2.log and "killed" not in tp2.log  # rank 1 left when told to
    for line in tp2.perf:
        assert _pid_gone(line["pid"]), f"rank {line['rank']} (pid {line['pid']}) still runs"
