"""The real CUDA path, on a machine with an NVIDIA GPU (skipped, with the reason, elsewhere).

* device-event stage timing against the stage's synchronized wall time: the same span, so
  the same order of magnitude, and the device time never longer than the wall time (events
  sit inside the two synchronizes);
* the peak device memory of a stage that allocates a known tensor, nested stages included;
* tinyav's INT8 matmul through a real ``harness`` worker (pinned to device 0 by a profile
  with ``device_count = 1``) with shapes that reach ``torch._int_mm`` (32 rows > 16, dims
  multiples of 8): ``dispatch.int8_mm.ran`` is ``int_mm``, and the attempt carries
  ``stage_device`` / ``stage_memory`` only where the target used stages.

Figures are printed (``-s``) for the closing note of whoever runs it on a GPU.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import torch

from harness import platforms, probe
from harness.cases import load_suite
from harness.cases.plan import build_plan
from harness.execution.run import Runner, RunOptions
from harness.platforms.profile import Profile

REPO = Path(__file__).resolve().parents[2]
_WHY = platforms.why_not("cuda")
pytestmark = pytest.mark.skipif(_WHY is not None, reason=f"needs a CUDA GPU: {_WHY}")

# Slack for the device span against the wall span: both are read around the same synchronize,
# so the device time exceeds the wall time only by timer resolution.
EPS_S = 1e-3


def _stage(name: str, fn: object) -> tuple[float, float, int]:
    rec = probe._begin(0, "cuda", None, device=platforms.get("cuda"))
    try:
        with probe.stage(name):
            fn()  # type: ignore[operator]
    finally:
        probe._end()
    return rec.stages[name], rec.stage_device[name], rec.stage_memory[name]


def test_device_event_stage_time_is_the_wall_span_of_the_same_work() -> None:
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()

    def work() -> None:
        for _ in range(50):
            a @ a

    work()  # warm cuBLAS up outside the measurement
    t0 = time.perf_counter()
    wall, device, _peak = _stage("matmul", work)
    outer = time.perf_counter() - t0
    print(f"\nmatmul stage: wall {wall * 1e3:.3f} ms, device {device * 1e3:.3f} ms")
    assert 0 < device <= wall + EPS_S
    assert wall <= outer
    assert device >= wall / 10, f"device {device:.6f} s vs wall {wall:.6f} s"


def test_peak_memory_of_a_stage_covers_the_tensor_it_allocates() -> None:
    nbytes = 256 * 2**20
    torch.empty(1, device="cuda")  # the device is initialized before the stage

    def alloc() -> None:
        t = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        t.fill_(1)
        del t

    _wall, _device, peak = _stage("alloc", alloc)
    print(f"\nalloc stage: peak {peak} bytes for a {nbytes}-byte tensor")
    assert peak >= nbytes

    rec = probe._begin(0, "cuda", None, device=platforms.get("cuda"))
    try:
        with probe.stage("outer"):
            alloc()
            with probe.stage("inner"):
                small = torch.empty(nbytes // 4, dtype=torch.uint8, device="cuda")
                del small
    finally:
        probe._end()
    assert rec.stage_memory["outer"] >= nbytes  # its own peak, from before inner reset it
    assert nbytes // 4 <= rec.stage_memory["inner"] < nbytes


CASE = """
id = "int8-mm-cuda"
kind = "quant"
target = "tinyav.scenarios.quant:dispatch_path"
params = { platform = "cuda", expect_int8_mm = "int_mm", expect_residual_gate = "fused_cuda" }
timeout_s = 300
[[checks]]
metric = "note.dispatch.int8_mm.ran"
op = "=="
threshold = "int_mm"
[[checks]]
metric = "note.device.ran"
op = "=="
threshold = "cuda"
"""


@pytest.mark.slow
def test_tinyav_int8_matmul_reaches_int_mm_in_a_pinned_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    (tmp_path / "cases").mkdir()
    (tmp_path / "cases" / "int8.toml").write_text(CASE)
    suite = load_suite([tmp_path / "cases"])
    assert not suite.errors, suite.errors
    runner = Runner(
        RunOptions(
            profile=Profile(name="gpu", platform="cuda", device_count=1, source="gpu.toml"),
            out_root=tmp_path / "reports",
            code_roots=(str(REPO / "targets" / "tinyav"),),
            cwd=str(REPO),
        )
    )
    runner.run_plan(build_plan(suite.cases, ["cuda"]))
    report = runner.finish()
    (case,) = report.cases
    (attempt,) = case.attempts
    print(f"\nint8 case: {case.status}, notes {dict(attempt.notes)}")
    assert case.status == "passed", (case.reason, attempt.error)
    assert not case.simulated
    assert attempt.notes["dispatch.int8_mm.ran"] == "int_mm"
    assert attempt.notes["dispatch.residual_gate.ran"] == "fused_cuda"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    first = visible.split(",")[0] if visible else "0"
    assert report.env["device_assignment"]["pinned"] == {"cuda": first}
    fp = report.env["platform_fingerprints"]["cuda"]
    print(f"cuda fingerprint: {fp}")
    assert fp["arch"].startswith("sm_") and fp["devices"][0]["memory_bytes"] > 0
