"""Shared by the diffusers case tests: `harness run` of a case file in a checkout, and a
scratch checkout holding a copy of the scenario package (to commit a planted bug into)."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
CODE_ROOT = REPO / "targets" / "diffusers_scenarios"


def require_diffusers(reason: str) -> None:
    """Skip the calling test module where diffusers is not installed, without importing it:
    ``pytest.importorskip`` imports it (~1.3 s of CPU, with the ``torch._dynamo`` it imports)
    in each xdist worker's collection, though most of these tests run it in subprocesses. A
    diffusers that is installed but does not import fails the tests that use it: not a skip."""
    if importlib.util.find_spec("diffusers") is None:
        pytest.skip(reason, allow_module_level=True)


# The tests that build diffusers' models in the test process share one xdist worker, which
# imports diffusers' and transformers' model modules (~2.5 s of CPU) once; the CLIP metric's
# tests (tests/metrics/test_clip.py) join it for transformers.
IN_PROCESS = pytest.mark.xdist_group("diffusers-in-process")


def weights_digest(pipe: Any) -> str:
    """sha256 of every weight of a pipeline's modules, by component and key (torch is imported
    here, not at the top: this module is also imported where torch need not be)."""
    import torch

    h = hashlib.sha256()
    for part, module in sorted(pipe.components.items()):
        if isinstance(module, torch.nn.Module):
            for key, t in sorted(module.state_dict().items()):
                h.update(f"{part}.{key}".encode())
                h.update(t.contiguous().numpy().tobytes())
    return h.hexdigest()


def harness_run(out: Path, *args: str, repo: Path = REPO) -> dict[str, Any]:
    """`harness run` in checkout ``repo`` with its scenario package as code root (a case file
    that names its own ``code_root`` resolves it in the same checkout); returns the exit code
    and the report."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", *args,
         "--code-root", "targets/diffusers_scenarios", "--out", str(out), "--run-id", "r", "-q"],
        cwd=repo, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    report = out / "r" / "report.json"
    assert report.is_file(), proc.stderr[-3000:]
    return {"rc": proc.returncode, "stderr": proc.stderr, **json.loads(report.read_text())}


def scratch_checkout(tmp_path: Path, case_file: Path) -> tuple[Path, Path]:
    """A scratch checkout holding a copy of the scenario package, ``case_file`` and the runner
    profiles; returns it and its copy of the package's directory."""
    root = tmp_path / "checkout"
    package = root / "targets" / "diffusers_scenarios"
    shutil.copytree(CODE_ROOT, package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "runners", root / "runners")
    (root / "cases" / "diffusers").mkdir(parents=True)
    shutil.copy(case_file, root / "cases" / "diffusers" / case_file.name)
    return root, package / "diffusers_scenarios"


def checks_of(case: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["metric"]: c for c in case["checks"]}


def by_id(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["id"]: c for c in doc["cases"]}


def suite_cases(run: Any, case_file: Path) -> dict[str, dict[str, Any]]:
    """The cases of ``case_file`` (one of cases/diffusers/) in the bundled suite's run (the
    ``bundled_suite`` fixture of tests/conftest.py), by id."""
    doc = json.loads((run.dir / "report.json").read_text())
    want = case_file.parts[-2:]
    return {c["id"]: c for c in doc["cases"] if Path(c["source"]).parts[-2:] == want}
