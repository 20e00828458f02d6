"""The bundled tinyav suite (cases/; of its cold-import cases the two that import no torch, see
SAME_ON_EVERY_PLATFORM) on platforms this CPU machine does not have: one `harness run
--platform hip --platform npu --platform cuda` (the batched runner's platforms in one run, one
report) and `--runner mi355x` (HIP gfx950). Each runs once (module-scoped) and many things are
asserted on its report, per platform: every result is labelled simulated and carries the
identity it ran as, nothing fails for lack of hardware (checks on what ran on the device are
"not run: simulated"), the decisions follow the simulated platform (int_mm planned on cuda, no
fused kernels on HIP, fnuz on MI300-class HIP, fn on gfx950), the policy that judged each
result is recorded with its rule, and bless refuses every one of them."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def harness(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )


class Suite:
    """One run of the whole suite and its report, seen from one of the run's platforms."""

    def __init__(self, out: Path, *args: str) -> None:
        self.dir = out / "run"
        self.proc = harness("run", *args, "--out", str(out), "--run-id", "run", "-q")
        self.doc: dict[str, Any] = json.loads((self.dir / "report.json").read_text())
        self.platform = ""
        self.cases = {c["id"]: c for c in self.doc["cases"]}

    def on(self, platform: str) -> Suite:
        """This run's results on ``platform`` (the same run folder and process)."""
        view = copy.copy(self)
        view.platform = platform
        view.cases = {c["id"]: c for c in self.doc["cases"] if c["platform"] == platform}
        return view

    def notes(self, case_id: str) -> dict[str, Any]:
        notes: dict[str, Any] = self.cases[case_id]["attempts"][0]["notes"]
        return notes

    def check(self, case_id: str, name: str) -> dict[str, Any]:
        return next(k for k in self.cases[case_id]["checks"] if k["name"] == name)


# the tinyav suite (cases/diffusers declares platforms = ["cpu"]: skipped on these, by design)
TINYAV = ("cases/loader", "cases/quant", "cases/pipeline")
# Of the six cold-import cases, the two that import neither a backend nor torch: each still
# runs in a fresh interpreter under each simulated platform (and fails there if that worker's
# set-up imported torch). The other four check the same import graph of tinyav.quant, which no
# platform changes, and each fresh interpreter of theirs imports torch (~0.85 s of CPU: 12 per
# run, ~10 s of CI's CPU); the bundled suite's run checks them on the CPU.
SAME_ON_EVERY_PLATFORM = "not cold-import or cold-import-quant"


def _suite(factory: pytest.TempPathFactory, *args: str) -> Suite:
    return Suite(factory.mktemp("sim"), *TINYAV, *args)


# The three simulated platforms' tests share one run: they run on one xdist worker.
THREE = pytest.mark.xdist_group("simulated-three")


@pytest.fixture(scope="module")
def three(tmp_path_factory: pytest.TempPathFactory) -> Suite:
    """The tinyav suite on hip, npu and cuda in one run. cuda's latency guard fails (policy),
    and the cpu runner's budgets, sized for an idle CPU, would judge this shared machine's load
    there: the cpu profile without its budgets (hip and npu only warn on an overrun). The guard
    per platform is tested with a controlled overrun (tests/platforms)."""
    folder = tmp_path_factory.mktemp("runner")
    text = (REPO / "runners" / "cpu.toml").read_text()
    runner = folder / "cpu-unbudgeted.toml"
    runner.write_text(
        text.split("\n[budgets]")[0].replace('name = "cpu"', 'name = "cpu-unbudgeted"')
    )
    platforms = ("--platform", "hip", "--platform", "npu", "--platform", "cuda")
    only = ("-k", SAME_ON_EVERY_PLATFORM)
    return _suite(tmp_path_factory, *platforms, "--runner", str(runner), *only)


@pytest.fixture
def hip(three: Suite) -> Suite:
    return three.on("hip")


@pytest.fixture
def npu(three: Suite) -> Suite:
    return three.on("npu")


@pytest.fixture
def cuda(three: Suite) -> Suite:
    return three.on("cuda")


@pytest.fixture(scope="module")
def mi355x(tmp_path_factory: pytest.TempPathFactory) -> Suite:
    # what gfx950 changes is the FP8 flavour: its cases, and one INT8 case for the policy (the
    # whole suite under hip runs in the mi300-class test; "fp8 or t2va-int8" also ran the
    # pruned INT8 pipeline, two attempts nothing here looks at)
    # mi355x promises a device: on this machine without one the run must ask for simulation
    only = "fp8 or t2va-int8 and not pruned"
    return _suite(tmp_path_factory, "--runner", "mi355x", "--simulate", "-k", only).on("hip")


def assert_whole_suite_passes_simulated(
    s: Suite, platform: str, arch: str, *, whole: bool = True
) -> None:
    assert s.proc.returncode == 0, s.proc.stderr[-4000:]
    cases = list(s.cases.values())
    kinds = {c["kind"] for c in cases}
    if whole:
        assert len(cases) >= 40 and kinds == {"loader", "quant", "import", "pipeline"}
        cold = {c["id"]: c for c in cases if c["kind"] == "import"}
        assert set(cold) == {"cold-import-quant-lazy", "cold-import-quant-torch-free"}
        for c in cold.values():  # each in a fresh interpreter of the simulated platform
            assert [a["fresh_process"] for a in c["attempts"]] == [True], c["id"]
    else:
        assert len(cases) >= 4 and "pipeline" in kinds
    for c in cases:
        assert c["platform"] == platform, c["id"]
        assert c["status"] == "passed", (c["id"], c["reason"])
        assert c["simulated"] is True, c["id"]
        assert c["reason"].startswith(f"simulated: {platform} is not available here"), c["id"]
        assert c["identity"]["simulated"] is True and c["identity"]["arch"] == arch, c["id"]
        assert {"latency.on_fail", "references.fallback", "timeouts.attempt_scale"} <= set(
            c["policy"]
        ), c["id"]
        for k in c["checks"]:  # nothing failed, nothing could-not-run but the simulated ones
            if k["passed"] is None:
                assert k["settings"].get("not_run") == "simulated" or k["metric"] == "clip", (
                    c["id"],
                    k["name"],
                    k["reason"],
                )
    # Checks on what ran on the device wait for the hardware; their reason says why.
    ran = s.check("t2va-int8", "note.device.ran")
    assert ran["passed"] is None and ran["settings"] == {
        "not_run": "simulated",
        "needs_device": True,
    }
    assert ran["reason"].startswith(f"not run: simulated: {platform} is not available here")
    assert s.notes("t2va-int8")["device.ran"] == "cpu"  # the fact, recorded all the same
    assert "simulated" in (s.dir / "summary.md").read_text()
    assert 'name="simulated" value="true"' in (s.dir / "junit.xml").read_text()


def assert_bless_refuses(s: Suite, tmp_path: Path) -> None:
    store = tmp_path / "refs"
    shutil.copytree(REPO / "references", store)
    before = (store / "manifest.json").read_bytes()
    for force in ((), ("--force",)):
        proc = harness(
            "refs",
            "bless",
            "--run",
            str(s.dir),
            "--case",
            "t2va-int8",
            "--reason",
            "simulated run",
            "--platform",
            s.platform,
            "--references",
            str(store),
            *force,
        )
        assert proc.returncode != 0, proc.stdout
        assert "can never be a reference" in proc.stderr + proc.stdout
    assert (store / "manifest.json").read_bytes() == before


@THREE
def test_hip_suite_mi300_class(hip: Suite, tmp_path: Path) -> None:
    assert_whole_suite_passes_simulated(hip, "hip", "gfx942")
    assert hip.cases["t2va-fp8"]["identity"]["fp8"] == "e4m3fnuz"
    assert hip.notes("t2va-fp8")["fp8.flavour"] == "float8_e4m3fnuz"
    assert hip.check("t2va-fp8", "note.fp8.flavour")["passed"] is True
    for op in ("int8_mm", "residual_gate"):
        assert hip.notes("t2va-int8")[f"dispatch.{op}.plan"] in ("dequant_matmul", "eager")
    assert "fused_kernels" not in hip.cases["t2va-int8"]["identity"]["capabilities"]
    # The hip SSIM threshold is policy: 0.95, decided by hip's default, applied to the check.
    assert hip.cases["t2va-int8"]["policy"]["quality.ssim(video)"]["rule"] == (
        "platform hip default"
    )
    assert hip.check("t2va-int8", "ssim(video)")["threshold"] == 0.95
    assert hip.cases["t2va-int8"]["policy"]["latency.on_fail"]["value"] == "warn"
    assert_bless_refuses(hip, tmp_path)


def test_hip_suite_gfx950_from_the_mi355x_profile(mi355x: Suite, tmp_path: Path) -> None:
    assert_whole_suite_passes_simulated(mi355x, "hip", "gfx950", whole=False)
    assert mi355x.doc["runner"] == "mi355x"
    assert mi355x.notes("t2va-fp8")["fp8.flavour"] == "float8_e4m3fn"
    flavour = mi355x.check("t2va-fp8", "note.fp8.flavour")
    assert flavour["passed"] is True and flavour["threshold"] == "float8_e4m3fn"
    # Asked for MI300 numerics explicitly: still fnuz on an MI355 runner.
    assert mi355x.notes("t2va-fp8-fnuz")["fp8.flavour"] == "float8_e4m3fnuz"
    assert mi355x.cases["t2va-int8"]["policy"]["latency.on_fail"] == {
        "value": "warn",
        "rule": "runner mi355x",
        "source": "runners/mi355x.toml",
    }
    assert_bless_refuses(mi355x, tmp_path)


@THREE
def test_cuda_suite_plans_cuda_kernels(cuda: Suite, tmp_path: Path) -> None:
    assert_whole_suite_passes_simulated(cuda, "cuda", "sm_90")
    notes = cuda.notes("t2va-int8")
    assert notes["dispatch.int8_mm.plan"] == "int_mm"
    assert notes["dispatch.residual_gate.plan"] == "fused_cuda"
    assert notes["dispatch.int8_mm.ran"] == "dequant_matmul"
    assert notes["dispatch.residual_gate.ran"] == "eager"
    assert cuda.check("t2va-int8", "note.dispatch.int8_mm.plan")["passed"] is True
    assert cuda.check("t2va-int8", "note.dispatch.int8_mm.ran")["passed"] is None
    assert cuda.notes("dispatch-cuda")["dispatch.int8_mm.plan"] == "int_mm"
    assert cuda.notes("t2va-fp8")["fp8.flavour"] == "float8_e4m3fn"
    assert cuda.cases["t2va-int8"]["policy"]["latency.on_fail"]["value"] == "fail"
    assert_bless_refuses(cuda, tmp_path)


@THREE
def test_npu_suite(npu: Suite, tmp_path: Path) -> None:
    assert_whole_suite_passes_simulated(npu, "npu", "Ascend910B3")
    assert npu.cases["t2va-fp8"]["identity"]["fp8"] is None  # no FP8 hardware on 910B
    assert npu.notes("t2va-fp8")["fp8.flavour"] == "float8_e4m3fn"
    notes = npu.notes("t2va-int8")
    assert (notes["dispatch.int8_mm.plan"], notes["dispatch.residual_gate.plan"]) == (
        "dequant_matmul",
        "eager",
    )
    assert npu.cases["t2va-int8"]["policy"]["timeouts.attempt_scale"]["value"] == 2.0
    assert_bless_refuses(npu, tmp_path)


@THREE
def test_one_run_holds_each_case_once_per_platform(three: Suite) -> None:
    ids = {p: set(three.on(p).cases) for p in ("hip", "npu", "cuda")}
    assert ids["hip"] == ids["npu"] == ids["cuda"] and len(ids["hip"]) >= 40
    assert len(three.doc["cases"]) == 3 * len(ids["hip"])  # nothing on another platform
