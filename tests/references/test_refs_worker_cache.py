"""A worker verifies each reference file once per (path, size, mtime_ns), and again once the
file changes: real worker process, real tinyav case, real reference files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from harness.cases.load import load_file
from harness.execution.pool import WorkerPool, WorkerSpec
from harness.worker import protocol as p
from harness.worker.protocol import AttemptJob

REPO = Path(__file__).resolve().parents[2]


def _attempt(pool: WorkerPool, spec: WorkerSpec, job: AttemptJob) -> dict[str, Any]:
    handle = pool.get(spec)
    reply = handle.request(
        p.AttemptRequest(handle.next_nonce(), job),
        timeout=300,
        case_id=job.case.id,
        index=job.index,
    )
    assert isinstance(reply, p.AttemptReply), reply
    return dict(reply.attempt)


def _video_checks(attempt: dict[str, Any]) -> list[dict[str, Any]]:
    """The checks that compare the ``video`` output with its reference frames pixel by pixel."""
    pixel = {"ssim", "psnr", "mae"}
    return [c for c in attempt["checks"] if c.get("output") == "video" and c["metric"] in pixel]


def test_changed_reference_file_fails_the_next_attempt_in_the_same_worker(
    tmp_path: Path,
) -> None:
    case = next(c for c in load_file(REPO / "cases" / "pipeline" / "t2va.toml"))
    store = tmp_path / "references"
    shutil.copytree(REPO / "references", store)
    manifest = json.loads((store / "manifest.json").read_text())
    video = manifest["references"][case.reference]["any"]["video"]
    frame = store / video["files"][0]["path"]
    original = frame.read_bytes()

    pool = WorkerPool(tmp_path / "logs")
    spec = WorkerSpec(platform="cpu", code_roots=(str(REPO / "targets" / "tinyav"),))

    def job(i: int) -> AttemptJob:
        return AttemptJob(
            case=case,
            platform="cpu",
            platform_chain=("cpu", "any"),
            index=i,
            seed=case.seed,
            output_dir=str(tmp_path / f"a{i}"),
            references_root=str(store),
        )

    try:
        first = _attempt(pool, spec, job(0))
        assert first["status"] == "passed", first
        assert _video_checks(first) and all(c["passed"] for c in _video_checks(first))
        pid = pool.get(spec).pid

        frame.write_bytes(original[:-1] + bytes([original[-1] ^ 0xFF]))  # same size
        second = _attempt(pool, spec, job(1))
        assert pool.get(spec).pid == pid  # the same worker process, its memo warm
        video_checks = _video_checks(second)
        assert video_checks and all(c["passed"] is False for c in video_checks), video_checks
        assert all(
            f"reference file {frame} does not match the manifest" in c["reason"]
            for c in video_checks
        ), video_checks

        frame.write_bytes(original)  # restored: verified again, and passes
        third = _attempt(pool, spec, job(2))
        assert pool.get(spec).pid == pid
        assert third["status"] == "passed"
        assert all(c["passed"] for c in _video_checks(third)), _video_checks(third)
    finally:
        pool.close()
