"""Helpers for the diffusers scenario tests: the repository, the CLI in a subprocess, and a
Python environment that is this one minus diffusers (for the honest-skip tests)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = REPO / "targets" / "diffusers_scenarios"

for p in (SCENARIOS, REPO):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))


def harness(
    *args: str, python: str = sys.executable, cwd: Path = REPO, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """``python -m harness.cli ARGS`` with this checkout's harness first on the path."""
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    )
    return subprocess.run(
        [python, "-m", "harness.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def report(run_dir: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((run_dir / "report.json").read_text())
    return doc


def by_id(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["id"]: c for c in doc["cases"]}


def _hidden(name: str, hide: tuple[str, ...]) -> bool:
    """``diffusers``, ``diffusers-0.42.1.dist-info`` and the like."""
    stem = name.split("-")[0].split(".")[0].lower()
    return stem in hide


@pytest.fixture(scope="session")
def python_without_diffusers(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A real interpreter in which diffusers is not installed: a fresh virtual environment
    (same base Python) whose one site directory is a view of this environment's site-packages
    with every entry but diffusers' linked in. torch, numpy, av... import as usual; the
    worker's ``find_spec("diffusers")`` finds nothing, exactly as on a machine without it."""
    root = tmp_path_factory.mktemp("no-diffusers")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = Path(sysconfig.get_paths()["purelib"])
    view = root / "site-view"
    view.mkdir()
    for entry in site.iterdir():
        if not _hidden(entry.name, ("diffusers",)):
            (view / entry.name).symlink_to(entry)
    python = venv / "bin" / "python"
    new_site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # addsitedir, not a bare path: the view's own .pth files are processed too.
    (Path(new_site) / "view.pth").write_text(f"import site; site.addsitedir({str(view)!r})\n")
    return str(python)
