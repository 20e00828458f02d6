"""Reading a server's perf log into the attempt: rank 0's stages and fingerprints, other ranks'
stages as notes, several requests prefixed, lines of other requests ignored."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness import probe
from harness.probe.perflog import append_line, perf_file
from harness.worker.server_perf import record_perf_log


def line(rid: str, rank: int, denoise: float, **extra: Any) -> dict[str, Any]:
    return {
        "schema": "harness.perf/1",
        "request_id": rid,
        "rank": rank,
        "stages": {"DenoisingStage": denoise},
        "stage_cpu": {"DenoisingStage": denoise / 2},
        "fingerprints": {"latents": {"hash": f"h-{rid}-{rank}", "shape": [1]}},
        "error": None,
        **extra,
    }


def recorded(tmp_path: Path, ids: dict[str, str]) -> Any:
    probe._begin(0, "cpu", tmp_path / "out")
    try:
        with probe.stage("server.startup"):
            pass
        record_perf_log(tmp_path, ids)
    finally:
        rec = probe._end()
    return rec


def test_two_ranks_and_two_requests(tmp_path: Path) -> None:
    for rid, t in (("c-0-0", 0.25), ("c-0-1", 0.5), ("other", 9.0)):
        append_line(perf_file(tmp_path, 0, pid=11), line(rid, 0, t))
        append_line(perf_file(tmp_path, 1, pid=12), line(rid, 1, t + 0.125))
    (tmp_path / "perf-rank0-13.jsonl").write_text("not json\n")  # a torn line is skipped
    rec = recorded(tmp_path, {"c-0-0": "r0.", "c-0-1": "r1."})
    # rank 0's stages add up over the requests (as a stage entered twice does)
    assert list(rec.stages) == ["server.startup", "DenoisingStage"]
    assert rec.stages["DenoisingStage"] == 0.75
    assert rec.stage_cpu["DenoisingStage"] == 0.375
    assert rec.fingerprints == {
        "r0.latents": {"hash": "h-c-0-0-0", "shape": [1]},
        "r1.latents": {"hash": "h-c-0-1-0", "shape": [1]},
    }
    # the other rank's seconds are notes; nothing of request "other" is taken
    assert rec.notes["server.rank1.DenoisingStage"] == 1.0
    assert "server.perf_log" not in rec.notes


def test_a_server_without_a_perf_log_is_noted(tmp_path: Path) -> None:
    rec = recorded(tmp_path, {"c-0-0": ""})
    assert list(rec.stages) == ["server.startup"]
    assert "no perf-log line for request ids ['c-0-0']" in rec.notes["server.perf_log"]


def test_a_request_that_failed_in_the_server_is_noted(tmp_path: Path) -> None:
    append_line(perf_file(tmp_path, 0, pid=1), line("c-0-0", 0, 0.1, error="ValueError: x"))
    rec = recorded(tmp_path, {"c-0-0": ""})
    assert rec.notes["server.rank0.error"] == "ValueError: x"


def test_the_file_that_served_each_rank_is_noted_for_provenance(tmp_path: Path) -> None:
    for rank in (0, 1):
        code = f"/wt/head/srv/engine{rank}.py"
        append_line(perf_file(tmp_path, rank, pid=rank), line("c-0-0", rank, 0.1, code_file=code))
    rec = recorded(tmp_path, {"c-0-0": ""})
    assert rec.notes["server.harness.target_file"] == "/wt/head/srv/engine0.py"
    assert rec.notes["server.rank1.harness.target_file"] == "/wt/head/srv/engine1.py"
