"""Two-environment fixtures: real virtual environments over the test environment that differ in
one pure-Python distribution, ``tinyav_knob``, and a small scenario that reads it.

Each environment is made by ``python -m venv --system-site-packages``; since the test
environment may itself be a venv (whose packages ``--system-site-packages`` does not reach),
a ``.pth`` file adds the test environment's site-packages after the venv's own, so torch and
numpy are shared, not installed twice. ``tinyav_knob`` is placed directly into each venv's
site-packages as a package plus its ``.dist-info`` (no build, no network).

The scenario (``knobscen:render``) draws seeded noise, scales it by ``tinyav_knob.NOISE_GAIN``
in the ``render`` stage (which also sleeps ``tinyav_knob.DELAY_S``) and outputs two 32x32 RGB
frames: a knob release that changes the gain changes the frames, one that sleeps slows the
stage, and one that only bumps the version changes nothing.
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

SCENARIO = '''\
"""A scenario whose output depends on the installed tinyav_knob."""

import time

import numpy as np
import tinyav_knob

from harness import probe


def render(size: int = 32) -> None:
    rng = np.random.default_rng(probe.seed())
    noise = rng.standard_normal((2, size, size, 1)).astype(np.float32)
    probe.fingerprint("latents.init", noise)
    with probe.stage("render"):
        ramp = np.linspace(40.0, 200.0, size, dtype=np.float32)[None, None, :, None]
        image = ramp + 8.0 * tinyav_knob.NOISE_GAIN * noise
        time.sleep(tinyav_knob.DELAY_S)
        probe.fingerprint("render.image", image)
    frames = np.clip(np.repeat(image, 3, axis=-1), 0, 255).astype(np.uint8)
    probe.output("video", frames, kind="video", fps=8)
    probe.note("knob.version", tinyav_knob.__version__)
'''

CASE = """\
id = "knob-render"
kind = "pipeline"
target = "knobscen:render"
reference = "knob-render"
frames = "all"
seed = 7
repeats = 1
warmup = 0
timeout_s = 60
description = "two frames whose noise gain comes from the installed tinyav_knob"
[[checks]]
metric = "psnr"
output = "video"
op = ">="
threshold = 30.0
"""

NAME = "knob-render"
CASE_NAME = "pipeline/knob-render[cpu]"


def site_packages(venv: Path) -> Path:
    v = sys.version_info
    return venv / "lib" / f"python{v.major}.{v.minor}" / "site-packages"


def make_venv(venv: Path, *, version: str, gain: float, delay_s: float = 0.0) -> Path:
    """A venv over the test environment with ``tinyav_knob`` ``version``, whose noise gain is
    ``gain`` and whose ``render`` stage sleeps ``delay_s``."""
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    site = site_packages(venv)
    assert site.is_dir(), f"{venv}: no {site}"
    test_site = sysconfig.get_paths()["purelib"]
    (site / "zz_test_env.pth").write_text(f"import site; site.addsitedir({test_site!r})\n")
    pkg = site / "tinyav_knob"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        f'__version__ = "{version}"\nNOISE_GAIN = {gain!r}\nDELAY_S = {delay_s!r}\n'
    )
    info = site / f"tinyav_knob-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: tinyav_knob\nVersion: {version}\n"
    )
    (info / "RECORD").write_text("")
    return venv


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def make_project(root: Path) -> dict[str, Path]:
    """A git repository with the scenario under ``scen/`` (tag ``v1``), and a work folder with
    the case file and the runner profile (``runner``)."""
    repo = root / "repo"
    (repo / "scen").mkdir(parents=True)
    (repo / "scen" / "knobscen.py").write_text(SCENARIO)
    git(repo.parent, "init", "-q", str(repo))
    git(repo, "config", "user.email", "t@example.com")
    git(repo, "config", "user.name", "t")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "scenario")
    git(repo, "tag", "v1")
    work = root / "work"
    (work / "cases").mkdir(parents=True)
    (work / "cases" / "knob.toml").write_text(CASE)
    # The repository's cpu profile, but its workers import no torch before their first case:
    # the scenario uses numpy only, and each comparison round starts a zygote of its own per
    # environment (7 in this module), ~1 s of CPU each for a torch nothing here uses.
    cpu = (REPO / "runners" / "cpu.toml").read_text()
    assert '\nname = "cpu"\n' in cpu
    runner = work / "runners" / "cpu.toml"
    runner.parent.mkdir()
    runner.write_text(cpu.replace('\nname = "cpu"\n', '\nname = "cpu"\npreimport = []\n', 1))
    return {
        "repo": repo,
        "work": work,
        "runs": root / "runs",
        "refs": root / "refs",
        "runner": runner,
    }
