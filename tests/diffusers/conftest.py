"""Helpers for the diffusers scenario tests: the repository, the CLI in a subprocess, weights
built in a fresh interpreter, and a Python environment that is this one minus diffusers (for
the honest-skip tests)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest
from bareenv import PREFIX, bare_env

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


# Built in a fresh interpreter whose environment names nothing but the import path: the
# instrumented pipelines (ltx2 and wan, seeds 42 and 43) and the ComfyUI loader's tiny Wan
# transformer (seed 5), each as the sha256 of its weights.
FRESH_DIGESTS = """
import hashlib, torch
torch.set_num_threads(1)
from diffcases import weights_digest
from diffusers_scenarios.components import build
from diffusers_scenarios.transformer_ckpt import TINY_WAN, build_wan
for seed in (42, 43):
    for name in ("ltx2", "wan"):
        print("pipeline", name, seed, weights_digest(build(name, seed)))
h = hashlib.sha256()
for k, v in sorted(build_wan(TINY_WAN, 5).state_dict().items()):
    h.update(k.encode() + v.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
print("transformer", "wan", 5, h.hexdigest())
"""


@pytest.fixture(scope="session")
def fresh_digests() -> dict[tuple[str, str, int], str]:
    """``(what, name, seed) -> sha256 of its weights``, built in one fresh interpreter, for the
    tests that hold a fresh process's weights equal to their own process's
    (test_instrument.py, test_loader_convert.py; one xdist worker runs both). One interpreter
    for both: each imports torch, diffusers and transformers, ~3 s of CPU."""
    proc = subprocess.run(
        [sys.executable, "-c", FRESH_DIGESTS],
        env=bare_env(
            PYTHONPATH=os.pathsep.join([str(SCENARIOS), str(REPO), str(Path(__file__).parent)])
        ),
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    rows = [line.split() for line in proc.stdout.splitlines() if line.count(" ") == 3]
    digests = {(what, name, int(seed)): digest for what, name, seed, digest in rows}
    assert len(digests) == 5, proc.stdout + proc.stderr[-2000:]
    return digests


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
    # The view's modules are this environment's files under another path. Where compiled
    # modules are kept in a cache folder (PYTHONPYCACHEPREFIX, as CI does, bareenv.py), the
    # view's part of it is this environment's part: torch is not compiled again for the view
    # (torch alone: 4.4 s of CPU uncompiled against 1.7 s, measured 2026-12-05). Python checks
    # each cached module against its source's time and size, which are the same file's.
    prefix = os.environ.get(PREFIX)
    if prefix:
        cached = Path(prefix) / view.relative_to(view.anchor)
        cached.parent.mkdir(parents=True, exist_ok=True)
        cached.symlink_to(Path(prefix) / site.relative_to(site.anchor), target_is_directory=True)
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
