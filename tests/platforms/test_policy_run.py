"""Policy and identity through real workers: the same latency overrun fails on cuda and warns on
hip (per profile, with the deciding rule in report.json, summary.md and junit.xml); the
attempt's identity reaches the target through probe.platform_info(), simulated where the
platform is absent (all of cuda, hip and npu on this CPU machine); a needs_device check is not
run under simulation and does not block the case, but runs where the platform is real."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from harness.cases import load_suite
from harness.cases.plan import build_plan
from harness.execution.run import Runner, RunOptions
from harness.model import CaseResult, RunReport
from harness.platforms.profile import Profile, load_profile
from harness.report.io import write_run

# one run on four platforms (`default_run`): built once, on one xdist worker
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("policy-run")]

TARGETS = """
import sys, time
from harness import probe


def slow(seconds=0.3):
    with probe.stage("work"):
        time.sleep(seconds)


def who():
    info = probe.platform_info()
    assert info is not None, "no platform identity inside an attempt"
    for key in ("platform", "arch", "fp8", "simulated"):
        probe.note(f"info.{key}", "none" if info[key] is None else info[key])
    probe.note("info.int8_mm", "int8_mm" in info["capabilities"])
    probe.note("ran", "cpu")  # what really executed: always the CPU here
    probe.note("bare", "torch" not in sys.modules)
"""

CASES = """
[[case]]
id = "slow"
kind = "quant"
target = "ptargets:slow"
repeats = 2
budget = { work = 0.01 }

[[case]]
id = "who"
kind = "quant"
target = "ptargets:who"
[[case.checks]]
metric = "note.info.fp8"
op = "=="
threshold = "none"
thresholds = { cuda = "e4m3fn", hip = "e4m3fnuz", "hip:gfx950" = "e4m3fn" }
[[case.checks]]
metric = "note.info.simulated"
op = "=="
threshold = true
thresholds = { cpu = false }
[[case.checks]]
metric = "note.info.int8_mm"
op = "=="
threshold = false
thresholds = { cuda = true }
[[case.checks]]
name = "ran-on-device"
metric = "note.ran"
op = "=="
threshold = "cpu"
thresholds = { cuda = "cuda", hip = "hip", npu = "npu" }
needs_device = true

[[case]]
id = "who-fresh"
kind = "import"
target = "ptargets:who"
fresh_process = true
[[case.checks]]
metric = "note.bare"
op = "=="
threshold = true
[[case.checks]]
metric = "note.info.arch"
op = "=="
threshold = "none"
thresholds = { hip = "gfx942", "hip:gfx950" = "gfx950" }
"""


def run(tmp_path: Path, profile: Profile, platforms: tuple[str, ...]) -> tuple[RunReport, Path]:
    code = tmp_path / "code"
    code.mkdir(exist_ok=True)
    (code / "ptargets.py").write_text(TARGETS)
    cases = tmp_path / "cases"
    cases.mkdir(exist_ok=True)
    (cases / "p.toml").write_text(CASES)
    suite = load_suite([cases])
    assert not suite.errors, suite.errors
    runner = Runner(
        RunOptions(
            profile=profile,
            out_root=tmp_path / "reports",
            code_roots=(str(code),),
            cwd=str(tmp_path),
        )
    )
    runner.run_plan(build_plan(suite.cases, list(platforms)))
    report = runner.finish()
    write_run(report, runner.run_dir)
    return report, runner.run_dir


def by_key(report: RunReport) -> dict[tuple[str, str], CaseResult]:
    return {(c.id, c.platform): c for c in report.cases}


def json_case(run_dir: Path, case_id: str, platform: str) -> dict[str, Any]:
    doc = json.loads((run_dir / "report.json").read_text())
    return next(c for c in doc["cases"] if c["id"] == case_id and c["platform"] == platform)


@pytest.fixture(scope="module")
def default_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunReport, Path]:
    return run(tmp_path_factory.mktemp("policy"), Profile(), ("cpu", "cuda", "hip", "npu"))


def test_same_overrun_fails_on_cuda_and_warns_on_hip(default_run: tuple[RunReport, Path]) -> None:
    report, run_dir = default_run
    results = by_key(report)
    assert results[("slow", "cuda")].status == "failed"
    assert results[("slow", "cpu")].status == "failed"
    hip = results[("slow", "hip")]
    assert hip.status == "passed" and hip.simulated
    [warned] = hip.warnings
    assert warned.name == "budget(work)" and warned.policy == "warn"
    doc = json_case(run_dir, "slow", "hip")
    assert doc["policy"]["latency.on_fail"]["value"] == "warn"
    assert doc["policy"]["latency.on_fail"]["rule"] == "platform hip default"
    assert doc["policy"]["latency.on_fail"]["source"].endswith("policy.toml")
    check = next(c for c in doc["checks"] if c["name"] == "budget(work)")
    assert check["passed"] is False and check["policy"] == "warn"
    assert check["settings"]["on_fail_rule"] == "platform hip default"
    assert json_case(run_dir, "slow", "cuda")["policy"]["latency.on_fail"] == {
        "value": "fail",
        "rule": "platform cuda default",
        "source": doc["policy"]["latency.on_fail"]["source"],
    }


def test_a_warning_is_visible_in_summary_md_and_junit(default_run: tuple[RunReport, Path]) -> None:
    _, run_dir = default_run
    summary = (run_dir / "summary.md").read_text()
    # the case needs attention: a warning row, with the check and the rule that made it one
    line = next(x for x in summary.splitlines() if "`quant/slow[hip]`" in x and "⚠️" in x)
    assert "passed (simulated), warning" in line and "`budget(work)`" in line
    assert "(warn: platform hip default)" in line
    junit = (run_dir / "junit.xml").read_text()
    assert "warning: budget(work): latency.work" in junit
    assert "[platform hip default]" in junit
    assert '<property name="warnings" value="1" />' in junit


def test_the_identity_reaches_the_target_and_needs_device_checks_wait_for_hardware(
    default_run: tuple[RunReport, Path],
) -> None:
    report, run_dir = default_run
    results = by_key(report)
    for platform, arch, fp8 in (
        ("cuda", "sm_90", "e4m3fn"),
        ("hip", "gfx942", "e4m3fnuz"),
        ("npu", "Ascend910B3", "none"),
    ):
        r = results[("who", platform)]
        assert r.status == "passed", (platform, r.reason)
        assert r.simulated and r.identity is not None and r.identity["simulated"] is True
        notes = r.attempts[0].notes
        assert (notes["info.platform"], notes["info.arch"], notes["info.fp8"]) == (
            platform,
            arch,
            fp8,
        )
        ran = next(c for c in r.checks if c.name == "ran-on-device")
        assert ran.passed is None and ran.simulated and not ran.unjudged
        assert (ran.reason or "").startswith(f"not run: simulated: {platform} is not available")
        assert json_case(run_dir, "who", platform)["identity"]["arch"] == arch
    # cpu is real here: the same check runs (and passes), the result is not simulated.
    cpu = results[("who", "cpu")]
    assert cpu.status == "passed" and not cpu.simulated
    assert next(c for c in cpu.checks if c.name == "ran-on-device").passed is True
    assert cpu.identity is not None and cpu.identity["simulated"] is False
    # A fresh interpreter gets the identity too, and still starts bare.
    fresh = results[("who-fresh", "hip")]
    assert fresh.status == "passed", fresh.reason
    assert fresh.attempts[0].notes["bare"] is True


def test_a_profile_decides_for_its_platform_and_its_arch(tmp_path: Path) -> None:
    path = tmp_path / "mi355-strict.toml"
    path.write_text(
        textwrap.dedent(
            """
            name = "mi355-strict"
            platform = "hip"
            arch = "gfx950"
            [policy.latency]
            on_fail = "fail"
            """
        )
    )
    report, run_dir = run(tmp_path, load_profile(path), ("hip",))
    results = by_key(report)
    slow = results[("slow", "hip")]
    assert slow.status == "failed"
    assert json_case(run_dir, "slow", "hip")["policy"]["latency.on_fail"] == {
        "value": "fail",
        "rule": "runner mi355-strict",
        "source": str(path),
    }
    who = results[("who", "hip")]
    assert who.status == "passed", who.reason
    assert who.attempts[0].notes["info.arch"] == "gfx950"
    assert who.attempts[0].notes["info.fp8"] == "e4m3fn"  # gfx950: OCP fn, not MI300's fnuz
    assert results[("who-fresh", "hip")].status == "passed"
