"""``harness platforms``: what this machine has and whether a runner profile fits it; exit 0,
or 2 for a bad profile or one whose device_count the machine cannot serve."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from platcases import REPO, fake_cuda_torch, write_fake_torch


def harness(
    *args: str, env: dict[str, str] | None = None, cwd: Path = REPO
) -> subprocess.CompletedProcess[str]:
    child = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", "platforms", *args],
        env=child,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_help_has_an_example() -> None:
    proc = harness("--help")
    assert proc.returncode == 0
    assert "harness platforms --runner mi300x" in proc.stdout


def test_json_lists_every_platform_and_the_profile() -> None:
    proc = harness("--json", "--runner", "mi300x")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    by_name = {p["name"]: p for p in data["platforms"]}
    assert list(by_name)[:6] == ["cpu", "cuda", "hip", "npu", "xpu", "mps"]
    assert by_name["cpu"]["available"] is True
    hip = by_name["hip"]
    if not hip["available"]:
        assert hip["identity"]["simulated"] is True
        assert (hip["identity"]["arch"], hip["identity"]["fp8"]) == ("gfx942", "e4m3fnuz")
    prof = data["profile"]
    assert (prof["name"], prof["platform"], prof["device_count"]) == ("mi300x", "hip", 1)
    assert prof["source"].endswith("runners/mi300x.toml")
    # the resolved policy, each setting with the rule and the file that decided it
    on_fail = prof["policy"]["latency.on_fail"]
    assert on_fail["value"] == "warn" and on_fail["rule"] == "runner mi300x"
    assert on_fail["source"].endswith("runners/mi300x.toml")


def test_text_output_says_simulated_platforms_are_not_checked() -> None:
    proc = harness("--runner", "h100")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "platforms on this machine:" in out
    assert "runner profile: h100 (" in out
    assert "policy of platform cuda on runner h100" in out
    assert re.search(r"latency\.on_fail +fail +\(runner h100: \S*runners/h100\.toml\)", out), out
    if "cuda  simulated" in out:
        assert "device_count: 1 (not checked: " in out
        assert "device_count = 1 not checked: cuda is simulated here" in out


def test_an_unknown_profile_is_a_usage_error() -> None:
    proc = harness("--runner", "no-such-runner")
    assert proc.returncode == 2
    assert "runner profile 'no-such-runner' not found" in proc.stderr


def test_a_profile_wanting_more_devices_than_a_stand_in_cuda_has_exits_2(tmp_path: Path) -> None:
    # The CUDA runtime is a stand-in (fake torch with 2 H100s): the profile wants 8.
    fake = write_fake_torch(tmp_path / "fake")
    prof = tmp_path / "dgx.toml"
    prof.write_text('name = "dgx"\nplatform = "cuda"\ndevice_count = 8\n')
    proc = harness(
        "--runner",
        str(prof),
        env={
            "PYTHONPATH": os.pathsep.join([str(fake), str(REPO)]),
            "FAKE_TORCH": json.dumps(fake_cuda_torch(n=2)),
        },
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert (
        f"{prof}: key 'device_count' = 8: this machine has only 2 cuda device(s) "
        "(NVIDIA H100 80GB HBM3, NVIDIA H100 80GB HBM3)" in proc.stderr
    )
    assert "device_count: 8 (DOES NOT MATCH" in proc.stdout
