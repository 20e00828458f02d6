"""The registry: names, what is available, why not, and third-party platforms through the
``harness.platforms`` entry point group, tested with a real distribution on the import path
of a subprocess (``x.dist-info/METADATA`` + ``entry_points.txt`` + a module)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from platcases import REPO, run_py

from harness import platforms
from harness.model import vocab

PLUGIN = """
from harness.platforms import Detection, Identity, Platform


class Gaudi(Platform):
    name = "gaudi"
    default_arch = "gaudi3"
    simulated_device_name = "Intel Gaudi 3"
    visible_devices_env = "HABANA_VISIBLE_MODULES"

    def capabilities(self, arch):
        return ("bf16", "fp8")

    def fp8_flavour(self, arch):
        return "e4m3fn"

    def detect(self):
        return Detection(True, "gaudi stand-in: always here")

    def identity(self):
        return Identity("gaudi", "gaudi3", "e4m3fn", ("bf16", "fp8"), ("Gaudi 3",), 1)


PLATFORM = Gaudi()
NOT_A_PLATFORM = object()
"""


def write_distribution(site: Path, entry_points: str) -> Path:
    """A tiny installed distribution in ``site``: its metadata and one module."""
    info = site / "harness_gaudi-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: harness-gaudi\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[harness.platforms]\n{entry_points}")
    (site / "harness_gaudi.py").write_text(PLUGIN)
    return site


REGISTRY = """
import json
from harness import platforms
out = {
    "known": list(platforms.known()),
    "names": list(platforms.names()),
    "available": list(platforms.available()),
    "errors": platforms.third_party_errors(),
}
if "gaudi" in out["known"]:
    out["gaudi"] = platforms.resolve_identity("gaudi").to_json()
    out["why_not"] = platforms.why_not("gaudi")
print(json.dumps(out))
"""


def test_built_in_names_are_the_vocabulary() -> None:
    assert platforms.names() == vocab.PLATFORMS
    assert set(platforms.known()) >= set(vocab.PLATFORMS)


def test_unknown_platform_lists_the_known_ones() -> None:
    with pytest.raises(KeyError, match=r"unknown platform 'tpu' \(known: cpu, cuda, hip"):
        platforms.get("tpu")
    assert platforms.why_not("tpu") == (
        "unknown platform 'tpu' (known: cpu, cuda, hip, mps, npu, xpu)"
    )


def test_a_third_party_platform_comes_in_through_its_entry_point(tmp_path: Path) -> None:
    site = write_distribution(tmp_path / "site", "gaudi = harness_gaudi:PLATFORM\n")
    out = run_py(REGISTRY, paths=(site,))
    assert out["errors"] == []
    assert out["known"] == [*vocab.PLATFORMS, "gaudi"]
    assert out["names"] == list(vocab.PLATFORMS)  # the vocabulary stays the built-ins
    assert "gaudi" in out["available"] and out["why_not"] is None
    assert out["gaudi"]["arch"] == "gaudi3" and out["gaudi"]["simulated"] is False


def test_broken_third_party_entry_points_are_reported_by_name_and_never_crash(
    tmp_path: Path,
) -> None:
    site = write_distribution(
        tmp_path / "site",
        "gaudi = harness_gaudi:PLATFORM\n"
        "missing = harness_no_such_module:PLATFORM\n"
        "thing = harness_gaudi:NOT_A_PLATFORM\n"
        "cuda = harness_gaudi:PLATFORM\n",
    )
    out = run_py(REGISTRY, paths=(site,))
    assert out["known"] == [*vocab.PLATFORMS, "gaudi"]  # the good one still loads
    errors = "\n".join(out["errors"])
    assert len(out["errors"]) == 3, errors
    assert (
        "entry point 'missing' (harness.platforms = 'harness_no_such_module:PLATFORM'): "
        "failed to load: ModuleNotFoundError" in errors
    )
    assert (
        "entry point 'thing' (harness.platforms = 'harness_gaudi:NOT_A_PLATFORM'): is a "
        "object, expected a harness.platforms.Platform instance" in errors
    )
    assert "entry point 'cuda'" in errors and "Platform.name must be the same" in errors


def test_harness_platforms_lists_a_third_party_platform_and_its_broken_neighbour(
    tmp_path: Path,
) -> None:
    site = write_distribution(
        tmp_path / "site",
        "gaudi = harness_gaudi:PLATFORM\nmissing = harness_no_such_module:PLATFORM\n",
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(REPO)]))
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "platforms", "--json"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    gaudi = next(p for p in data["platforms"] if p["name"] == "gaudi")
    assert gaudi["available"] and gaudi["third_party"]
    assert gaudi["identity"]["device_names"] == ["Gaudi 3"]
    (err,) = data["third_party_errors"]
    assert err.startswith("entry point 'missing'")
