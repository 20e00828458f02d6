"""Detection, identity, fingerprint and stage measurement of each platform against stand-ins
for the runtimes this CPU machine cannot have (a ROCm/HIP torch, a CUDA torch, torch_npu).

Every test runs in a subprocess with the stand-in first on the import path, so the real torch
of the test process is never polluted; the names say that the runtime is mocked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from platcases import (
    MI300X,
    MI355X,
    fake_cuda_torch,
    fake_hip_torch,
    run_py,
    write_fake_torch,
    write_fake_torch_npu,
)

DETECT = """
import json
from harness import platforms
out = {"check": {n: platforms.check(n) for n in platforms.names()}}
out["available"] = list(platforms.available())
for name in ("cuda", "hip", "npu"):
    out[name] = platforms.resolve_identity(name).to_json()
out["fingerprints"] = platforms.fingerprints()
print(json.dumps(out))
"""


@pytest.fixture
def fake_torch_dir(tmp_path: Path) -> Path:
    return write_fake_torch(tmp_path / "fake")


def test_fake_hip_torch_is_detected_as_hip_and_not_as_cuda_with_a_stand_in_runtime(
    fake_torch_dir: Path,
) -> None:
    out = run_py(DETECT, paths=(fake_torch_dir,), fake_torch=fake_hip_torch(MI300X, n=8))
    assert out["check"]["hip"] == [True, "AMD Instinct MI300X"]
    available, why = out["check"]["cuda"]
    assert not available and "ROCm/HIP build (6.3.42131-fa1d09cbd)" in why
    assert out["available"] == ["cpu", "hip"]
    hip = out["hip"]
    assert hip["simulated"] is False
    assert hip["arch"] == "gfx942"  # the base of gcnArchName "gfx942:sramecc+:xnack-"
    assert hip["fp8"] == "e4m3fnuz"
    assert "fused_kernels" not in hip["capabilities"]
    assert hip["device_count"] == 8 and hip["device_names"] == ["AMD Instinct MI300X"] * 8
    assert hip["runtime"] == "6.3.42131-fa1d09cbd"
    assert hip["extra"]["gcn_arch_name"] == "gfx942:sramecc+:xnack-"
    # cuda on a HIP machine is simulated, with the reason
    assert out["cuda"]["simulated"] is True and "ROCm/HIP build" in out["cuda"]["reason"]
    fp = out["fingerprints"]["hip"]
    assert fp["arch"] == "gfx942" and fp["device_count"] == 8
    assert fp["devices"][0] == {
        "index": 0,
        "name": "AMD Instinct MI300X",
        "memory_bytes": 206_000_000_000,
        "multiprocessors": 304,
    }


def test_fake_hip_torch_with_gfx950_presents_the_fn_fp8_flavour_with_a_stand_in_runtime(
    fake_torch_dir: Path,
) -> None:
    out = run_py(DETECT, paths=(fake_torch_dir,), fake_torch=fake_hip_torch(MI355X))
    assert out["hip"]["arch"] == "gfx950"
    assert out["hip"]["fp8"] == "e4m3fn"
    assert out["check"]["cuda"][0] is False


def test_fake_cuda_torch_is_detected_as_cuda_and_not_as_hip_with_a_stand_in_runtime(
    fake_torch_dir: Path,
) -> None:
    out = run_py(DETECT, paths=(fake_torch_dir,), fake_torch=fake_cuda_torch(n=2))
    assert out["check"]["cuda"] == [True, "NVIDIA H100 80GB HBM3"]
    assert out["check"]["hip"] == [False, "this torch is not a ROCm/HIP build"]
    cuda = out["cuda"]
    assert (cuda["arch"], cuda["fp8"], cuda["device_count"]) == ("sm_90", "e4m3fn", 2)
    assert (cuda["driver"], cuda["runtime"]) == ("12.4", "12.4")
    assert "int8_mm" in cuda["capabilities"] and "fused_kernels" in cuda["capabilities"]
    fp = out["fingerprints"]["cuda"]
    assert fp["driver"] == "12.4" and fp["capability"] == "9.0"
    assert [d["multiprocessors"] for d in fp["devices"]] == [132, 132]


def test_fake_torch_npu_with_a_stand_in_runtime_is_an_ascend910b3_with_8_devices(
    tmp_path: Path,
) -> None:
    # The real torch (a CPU build here) with a torch_npu stand-in next to it.
    out = run_py(DETECT, paths=(write_fake_torch_npu(tmp_path / "npu"),))
    assert out["check"]["npu"] == [True, "Ascend910B3"]
    assert out["check"]["cuda"][0] is False and out["check"]["hip"][0] is False
    npu = out["npu"]
    assert (npu["arch"], npu["device_count"], npu["simulated"]) == ("Ascend910B3", 8, False)
    assert npu["fp8"] is None and "int8_mm" not in npu["capabilities"]
    assert npu["runtime"] == "2.5.1.fake" and npu["driver"] == "8.0.RC3.fake"
    assert npu["extra"]["soc_version"] == 223
    assert out["fingerprints"]["npu"]["devices"][7]["memory_bytes"] == 64 * 2**30


def test_without_torch_npu_npu_is_simulated_with_the_reason() -> None:
    out = run_py(DETECT)
    available, why = out["check"]["npu"]
    assert not available and why.startswith("torch_npu is not installed")
    assert out["npu"]["simulated"] is True and out["npu"]["arch"] == "Ascend910B3"


STAGES = """
import json, sys
from harness import platforms, probe
import torch
name = "{platform}"
if name == "npu":
    import torch_npu  # noqa: F401  (gives torch its torch.npu, as the real one does)
rt = torch.npu if name == "npu" else torch.cuda
rec = probe._begin(0, name, None, device=platforms.get(name))
with probe.stage("outer"):
    if hasattr(rt, "_alloc"):
        rt._alloc(8000)
        rt._alloc(0)
    with probe.stage("inner"):
        if hasattr(rt, "_alloc"):
            rt._alloc(3000)
            rt._alloc(0)
with probe.stage("inner"):  # entered twice: times add up, the peak is the higher one
    if hasattr(rt, "_alloc"):
        rt._alloc(1000)
probe._end()
calls = getattr(sys.modules.get("torch_npu"), "calls", None) or getattr(torch, "calls", [])
print(json.dumps({{
    "stages": list(rec.stages), "device": rec.stage_device, "memory": rec.stage_memory,
    "calls": calls,
}}))
"""


def test_fake_hip_stage_uses_device_events_and_peak_memory_with_a_stand_in_runtime(
    fake_torch_dir: Path,
) -> None:
    out = run_py(
        STAGES.format(platform="hip"),
        paths=(fake_torch_dir,),
        fake_torch=fake_hip_torch(elapsed_ms=12.5),
    )
    assert out["stages"] == ["outer", "inner"]
    assert out["device"] == {"outer": 0.0125, "inner": 0.025}
    # outer peaked at 8000 before inner reset the counter: that peak is kept for outer
    assert out["memory"] == {"outer": 8000, "inner": 3000}
    assert out["calls"].count("synchronize") == 6  # before and after each of three stages
    assert out["calls"].count("reset_peak") == 3


def test_fake_torch_npu_stage_uses_npu_events_with_a_stand_in_runtime(tmp_path: Path) -> None:
    out = run_py(STAGES.format(platform="npu"), paths=(write_fake_torch_npu(tmp_path / "n"),))
    assert out["device"] == {"outer": 0.004, "inner": 0.008}
    assert out["memory"] == {"outer": 0, "inner": 0}
    assert out["calls"].count("synchronize") == 6


def test_a_simulated_platform_measures_wall_time_only_with_a_stand_in_cuda_runtime(
    fake_torch_dir: Path,
) -> None:
    # hip asked for on a CUDA machine: HIP's runtime is not what is loaded, nothing is synced
    out = run_py(
        STAGES.format(platform="hip"), paths=(fake_torch_dir,), fake_torch=fake_cuda_torch()
    )
    assert out["stages"] == ["outer", "inner"]
    assert out["device"] == {} and out["memory"] == {} and out["calls"] == []


def test_an_uninitialized_device_is_not_synchronized_with_a_stand_in_cuda_runtime(
    fake_torch_dir: Path,
) -> None:
    out = run_py(
        STAGES.format(platform="cuda"),
        paths=(fake_torch_dir,),
        fake_torch=fake_cuda_torch(initialized=False),
    )
    assert out["calls"] == [] and out["device"] == {} and out["memory"] == {}


FAULT = """
import json
from harness import platforms, probe
import torch
rec = probe._begin(0, "cuda", None, device=platforms.get("cuda"))
out = {}
try:
    with probe.stage("decode"):
        torch.cuda._fault = "CUDA error: an illegal memory access was encountered"
except RuntimeError as exc:
    out["raised"] = str(exc)
torch.cuda._fault = None
try:
    with probe.stage("body_fails"):
        torch.cuda._fault = "CUDA error: a second fault"
        raise ValueError("the body's own error")
except Exception as exc:
    out["body"] = f"{type(exc).__name__}: {exc}"
probe._end()
out["stages"] = list(rec.stages)
print(json.dumps(out))
"""


def test_fake_cuda_fault_at_synchronize_propagates_from_the_stage_with_a_stand_in_runtime(
    fake_torch_dir: Path,
) -> None:
    out = run_py(FAULT, paths=(fake_torch_dir,), fake_torch=fake_cuda_torch())
    assert out["raised"] == "CUDA error: an illegal memory access was encountered"
    # a body that raised keeps its own error; the fault at the closing synchronize hides nothing
    assert out["body"] == "ValueError: the body's own error"
    assert out["stages"] == ["decode", "body_fails"]


ATTEMPT = """
import json, sys
from pathlib import Path
from harness.cases import load_suite
from harness.worker.attempt import run_attempt
from harness.worker.protocol import AttemptJob
suite = load_suite([Path(sys.argv[1])])
case = suite.cases[0]
job = AttemptJob(case=case, platform="cuda", platform_chain=("cuda", "any"), index=0, seed=0,
                 repeat=0, retry=0, warmup=False, side="head", round=0, output_dir=None,
                 references_root=None)
print(json.dumps(run_attempt(job).to_json()))
"""

FAULTY_TARGET = """
import torch
from harness import probe

def alloc(fault=""):
    with probe.stage("load"):
        torch.cuda._alloc(4096)
    with probe.stage("run"):
        torch.cuda._fault = fault or None
"""


def _attempt(tmp_path: Path, fake: Path, fault: str) -> dict[str, Any]:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "faulty.py").write_text(FAULTY_TARGET)
    case = tmp_path / "case.toml"
    case.write_text(
        f'id = "c"\nkind = "quant"\ntarget = "faulty:alloc"\nparams = {{ fault = "{fault}" }}\n'
    )
    code = ATTEMPT.replace("sys.argv[1]", repr(str(case)))
    return run_py(code, paths=(fake, tmp_path / "code"), fake_torch=fake_cuda_torch())


def test_fake_cuda_attempt_records_stage_memory_and_device_time_with_a_stand_in_runtime(
    tmp_path: Path, fake_torch_dir: Path
) -> None:
    a = _attempt(tmp_path, fake_torch_dir, "")
    assert a["status"] == "passed", a["error"]
    assert a["stage_memory"] == {"load": 4096, "run": 4096}
    assert set(a["stage_device"]) == {"load", "run"}


def test_fake_cuda_fault_at_synchronize_is_the_attempts_error_with_a_stand_in_runtime(
    tmp_path: Path, fake_torch_dir: Path
) -> None:
    a = _attempt(tmp_path, fake_torch_dir, "CUDA error: an illegal memory access was encountered")
    assert a["status"] == "error"
    assert a["error"]["type"] == "RuntimeError"
    assert "illegal memory access" in a["error"]["message"]
