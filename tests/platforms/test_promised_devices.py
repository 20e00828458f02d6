"""A runner profile that promises devices on a platform this machine does not have is refused
(exit 3, one line naming the platform and why) unless the run asks for simulation with
``--simulate``. NPU stands for the absent platform: no CI runner of this project has one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.platforms import why_not

TARGET = "from harness import probe\n\n\ndef work():\n    probe.note('ok', 1)\n"


def project(tmp_path: Path) -> Path:
    if why_not("npu") is None:
        pytest.skip("this machine has an NPU: the profile's promise holds")
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "tinytarget.py").write_text(TARGET)
    (tmp_path / "cases").mkdir()
    (tmp_path / "cases" / "t.toml").write_text(
        'id = "t"\nkind = "loader"\ntarget = "tinytarget:work"\ntimeout_s = 60\n'
    )
    (tmp_path / "npu-box.toml").write_text(
        'name = "npu-box"\nplatform = "npu"\narch = "Ascend910B3"\ndevice_count = 1\n'
        "preimport = []\n"  # the target uses no torch: its worker need not import it
    )
    return tmp_path


def run(root: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", "cases", "--runner", "npu-box.toml",
         "--code-root", "code", "--out", "runs", "--run-id", "r", "-q", *extra],
        cwd=root, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def test_a_profile_promising_an_absent_platform_is_exit_3_naming_it(tmp_path: Path) -> None:
    root = project(tmp_path)
    proc = run(root)
    assert proc.returncode == 3, proc.stderr
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert "npu-box.toml" in line and "device_count = 1" in line
    assert "npu is not available here" in line and "--simulate" in line
    assert "Traceback" not in proc.stderr
    assert not (root / "runs" / "r").exists()  # refused before anything ran


@pytest.mark.slow
def test_simulate_runs_it_labelled_simulated(tmp_path: Path) -> None:
    root = project(tmp_path)
    proc = run(root, "--simulate")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((root / "runs" / "r" / "report.json").read_text())
    (case,) = doc["cases"]
    assert case["platform"] == "npu" and case["simulated"] is True
