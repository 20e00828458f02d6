"""A runner profile's ``preimport``: the modules a persistent worker imports before it says it
is ready (the default: numpy and torch, so that no case's first attempt pays for them), ``[]``
for a stack that uses neither; through the real CLI and real workers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from platcases import write_torch_build

from harness.platforms import torch_build
from harness.platforms.profile import ProfileError, load_profile

TARGET = """
import os
import sys
from harness import probe

def loaded():
    probe.note("torch_loaded", "torch" in sys.modules)
    probe.note("pid", os.getpid())
"""

# Two cases: the run asks the worker for its environment after the first, so the second also
# shows what the harness's own probes imported into the worker.
CASE = """
[[case]]
id = "what-is-loaded"
kind = "loader"
target = "pre:loaded"

[[case]]
id = "what-is-loaded-next"
kind = "loader"
target = "pre:loaded"
"""


CLI_RUN = [sys.executable, "-m", "harness.cli", "run", "cases", "--code-root", "code"]


def run(tmp_path: Path, runner: str) -> list[dict[str, object]]:
    (tmp_path / "code").mkdir(exist_ok=True)
    (tmp_path / "code" / "pre.py").write_text(TARGET)
    (tmp_path / "cases").mkdir()
    (tmp_path / "cases" / "pre.toml").write_text(CASE)
    (tmp_path / "runners").mkdir()
    (tmp_path / "runners" / "r.toml").write_text(runner)
    proc = subprocess.run(
        [*CLI_RUN, "--runner", "runners/r.toml", "--run-id", "r", "-q"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads((tmp_path / "reports" / "r" / "report.json").read_text())
    return [c["attempts"][0]["notes"] for c in doc["cases"]]


@pytest.mark.slow
@pytest.mark.parametrize(("line", "torch"), [("", True), ("preimport = []", False)])
def test_the_worker_imports_what_the_profile_names_before_the_first_case(
    tmp_path: Path, line: str, torch: bool
) -> None:
    """The harness's own worker imports numpy whatever the profile says; torch only if asked
    (by default) or by the code under test: not for the harness's probes of the platform and
    the environment either, on a torch built for no device runtime (before, the second case
    found torch imported by them)."""
    first, second = run(tmp_path, f'name = "r"\nplatform = "cpu"\n{line}\n')
    assert first["pid"] == second["pid"]  # one worker
    assert first["torch_loaded"] is torch
    build = torch_build()
    if not torch and build is not None and build.accelerated:
        return  # a CUDA, ROCm or XPU build: the environment probe imports torch for the devices
    assert second["torch_loaded"] is torch


@pytest.mark.parametrize("value", ['"torch"', '["torch", 3]', '["not a module"]', '["a..b"]'])
def test_a_bad_preimport_names_the_file_and_the_key(tmp_path: Path, value: str) -> None:
    path = tmp_path / "r.toml"
    path.write_text(f'name = "r"\npreimport = {value}\n')
    with pytest.raises(ProfileError, match=r"r\.toml: key 'preimport'.*list of module names"):
        load_profile(path)


# A stand-in for a CUDA build of torch (not torch), on the worker's import path before the real
# one: its version file says CUDA, so the environment probe must import it to ask for devices.
CUDA_VERSION_PY = "__version__ = '2.13.0+cu128'\ncuda = '12.8'\nhip = None\nxpu = None\n"


@pytest.mark.slow
def test_a_probe_that_imports_torch_into_a_torch_free_worker_replaces_it(tmp_path: Path) -> None:
    """On a CUDA build, the environment probe imports torch (for the devices) into a worker
    whose profile leaves it out: the next case runs in a new worker, which has not."""
    write_torch_build(tmp_path / "code", CUDA_VERSION_PY, version="2.13.0+cu128", cuda="12.8")
    first, second = run(tmp_path, 'name = "r"\nplatform = "cpu"\npreimport = []\n')
    assert first["torch_loaded"] is second["torch_loaded"] is False
    assert first["pid"] != second["pid"]
    doc = json.loads((tmp_path / "reports" / "r" / "report.json").read_text())
    assert doc["env"]["torch"]["version"] == "2.13.0+cu128"  # the probe did import it


# A module that says which process imported it, and one whose import raises.
HEAVY = "import os\nIMPORTED_BY = os.getpid()\n"
BROKEN = "raise RuntimeError('broken install: this module cannot be imported')\n"
REQUIRING = """
import os
import sys
from harness import probe

def loaded(name: str = "heavy") -> None:
    probe.note("pid", os.getpid())
    probe.note("loaded", name in sys.modules)  # before this attempt imports anything
    module = __import__(name)
    probe.note("imported_by_this_worker", module.IMPORTED_BY == os.getpid())
"""
# In the order they run: code2's worker is started by the case whose requirement breaks, code's
# by the one that requires heavy; the case without a code root of its own runs in the side's
# worker (--code-root code).
REQUIRES_CASES = """
[[case]]
id = "a-requires-broken"
kind = "loader"
target = "req:loaded"
params = { name = "broken" }
code_root = "code2"
requires = ["broken"]

[[case]]
id = "b-requires-heavy"
kind = "loader"
target = "req:loaded"
code_root = "code"
requires = ["heavy"]

[[case]]
id = "c-requires-heavy-and-json"
kind = "loader"
target = "req:loaded"
code_root = "code"
requires = ["heavy", "json"]

[[case]]
id = "d-requires-absent"
kind = "loader"
target = "req:loaded"
code_root = "code"
requires = ["module_nobody_has"]

[[case]]
id = "e-requires-heavy-in-the-side-s-worker"
kind = "loader"
target = "req:loaded"
requires = ["heavy"]
"""


@pytest.mark.slow
def test_a_code_root_s_worker_imports_what_its_case_requires_before_it_is_ready(
    tmp_path: Path,
) -> None:
    """The worker of a case with a code root of its own imports the modules the case
    ``requires`` at start-up, in the zygote it is forked from (one import for the workers
    forked from it: a stack such as diffusers costs ~2.8 s of CPU per import); the code root's
    other cases share that worker whatever they require. A module whose import fails leaves
    the worker starting all the same, and the case raises that error as its own; one that is
    absent skips its case. The side's own worker imports only what the profile names."""
    for root in ("code", "code2"):
        (tmp_path / root).mkdir()
        (tmp_path / root / "req.py").write_text(REQUIRING)
    # installed (on the import path), as a stack's dependencies are; a code root's own modules
    # are the worker's to import, never its zygote's, which serves either side of a comparison
    (tmp_path / "libs").mkdir()
    (tmp_path / "libs" / "heavy.py").write_text(HEAVY)
    (tmp_path / "libs" / "broken.py").write_text(BROKEN)
    (tmp_path / "cases").mkdir()
    (tmp_path / "cases" / "req.toml").write_text(REQUIRES_CASES)
    (tmp_path / "runners").mkdir()  # numpy and torch left out: nothing else to import
    (tmp_path / "runners" / "cpu.toml").write_text(
        'name = "cpu"\nplatform = "cpu"\npreimport = []\n'
    )
    proc = subprocess.run(
        [*CLI_RUN, "-q", "--run-id", "r"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={
            **{k: v for k, v in os.environ.items() if k != "HARNESS_FORK_WORKERS"},
            "PYTHONPATH": str(tmp_path / "libs"),
        },
    )
    assert proc.returncode == 1, proc.stderr[-3000:]  # a-requires-broken fails: its error
    doc = json.loads((tmp_path / "reports" / "r" / "report.json").read_text())
    assert [c["id"] for c in doc["cases"]] == sorted(c["id"] for c in doc["cases"])
    cases = {c["id"]: c for c in doc["cases"]}
    notes = {cid: c["attempts"][0]["notes"] for cid, c in cases.items() if c["attempts"]}
    broken = cases["a-requires-broken"]
    assert broken["status"] == "error", broken["reason"]
    assert "broken install" in broken["attempts"][0]["error"]["message"]
    heavy, both = notes["b-requires-heavy"], notes["c-requires-heavy-and-json"]
    assert heavy["loaded"] is True and heavy["imported_by_this_worker"] is False  # its zygote's
    assert both["pid"] == heavy["pid"]  # one worker for the code root's cases
    assert cases["d-requires-absent"]["status"] == "skipped"
    assert "module_nobody_has" in cases["d-requires-absent"]["reason"]
    side = notes["e-requires-heavy-in-the-side-s-worker"]
    assert side["pid"] != heavy["pid"]
    assert side["loaded"] is False and side["imported_by_this_worker"] is True
