"""Code provenance end to end through ``harness compare``: the target package sits at the root of
its repository (``mypkg/`` next to ``cases/``), the command runs from the working tree with
``--code-root .``, and the same package is also installed editable in the environment.

The editable install is simulated cheaply and for real: a virtual environment made with
``venv --system-site-packages --without-pip`` over the test environment (a ``.pth`` file adds
the test environment's site-packages, where the harness is), whose site-packages holds
``__editable__.mypkg-0.1.pth`` naming the working tree, the path entry ``pip install -e .``
writes for a flat layout. The CLI itself runs under that venv's interpreter, so the workers
do too and read the ``.pth`` at start-up.

Before the fix the worker ran as ``python -m harness.worker``, which puts its working folder
(the working tree) first on ``sys.path``: both sides imported the working tree's
``mypkg/scene.py`` and a head that breaks the target read ``no_change``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest
from scratchrepo import REPO, git

pytestmark = pytest.mark.slow

TARGET = '''\
"""A tiny scene: one stage, one output."""

import numpy as np

from harness import probe


def render() -> None:
    with probe.stage("draw"):
        frame = np.full((2, 8, 8, 3), 128, dtype=np.uint8)
    probe.output("video", frame, kind="video", fps=8)
'''

CASES = """\
id = "scene"
kind = "pipeline"
target = "mypkg.scene:render"
seed = 1
timeout_s = 60
"""


def make_lab(root: Path) -> dict[str, Any]:
    """The repository, checked out at ``base``, with two packages at its root, ``mypkg`` and
    ``oldpkg``, each with the scene and a case for it; branch ``head`` plants a failure in
    ``mypkg`` and moves ``oldpkg`` under ``src/``, out of the code root. And the venv."""
    repo = root / "repo"
    (repo / "cases").mkdir(parents=True)
    for pkg in ("mypkg", "oldpkg"):
        (repo / pkg).mkdir()
        (repo / pkg / "__init__.py").write_text("")
        (repo / pkg / "scene.py").write_text(TARGET)
        (repo / "cases" / f"{pkg}.toml").write_text(
            CASES.replace("scene", f"{pkg}-scene", 1).replace("mypkg", pkg)
        )
    git(repo.parent, "init", "-q", str(repo))
    git(repo, "config", "user.email", "t@example.com")
    git(repo, "config", "user.name", "t")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    git(repo, "tag", "base")
    git(repo, "checkout", "-q", "-b", "head", "base")
    (repo / "mypkg" / "scene.py").write_text(
        TARGET.replace(
            '    with probe.stage("draw"):',
            '    raise AssertionError("planted")\n    with probe.stage("draw"):',
        )
    )
    (repo / "src").mkdir()
    git(repo, "mv", "oldpkg", "src/oldpkg")
    git(repo, "commit", "-qam", "a planted failure in mypkg; oldpkg moved under src/")
    git(repo, "checkout", "-q", "base")
    venv = root / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    v = sys.version_info
    site = venv / "lib" / f"python{v.major}.{v.minor}" / "site-packages"
    test_site = sysconfig.get_paths()["purelib"]
    (site / "zz_test_env.pth").write_text(f"import site; site.addsitedir({test_site!r})\n")
    (site / "__editable__.mypkg-0.1.pth").write_text(f"{repo}\n")
    return {"repo": repo, "python": str(venv / "bin" / "python"), "runs": root / "runs"}


def test_each_side_runs_its_own_checkout_and_a_side_that_did_not_is_not_comparable(
    tmp_path: Path,
) -> None:
    lab = make_lab(tmp_path)
    proc = subprocess.run(
        [
            lab["python"],
            "-m",
            "harness.cli",
            "compare",
            "--base",
            "base",
            "--head",
            "head",
            "--code-root",
            ".",
            "--rounds",
            "2",
            "--reuse-workers",  # provenance, not latency, is the subject
            "--runner",
            str(REPO / "runners" / "cpu.toml"),
            "--noise-dir",
            str(lab["runs"] / "noise"),
            "--references",
            str(lab["runs"] / "no-refs"),
            "--out",
            str(lab["runs"]),
            "--id",
            "c",
        ],
        cwd=lab["repo"],  # the working tree, at base
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    path = lab["runs"] / "c" / "comparison.json"
    assert path.is_file(), proc.stderr[-4000:]
    doc = json.loads(path.read_text())
    cases = {c["id"]: c for c in doc["cases"]}
    files = {s: doc[s]["code_files"] for s in ("base", "head")}
    tree = lab["repo"].resolve()

    # mypkg: each side imported its own checkout's file, so head's planted failure is found
    assert files["base"]["mypkg-scene"] != files["head"]["mypkg-scene"], "head ran base's code"
    for side in ("base", "head"):
        assert not files[side]["mypkg-scene"].startswith(str(tree / "mypkg")), files
    assert cases["mypkg-scene"]["verdict"] == "new_failure", cases["mypkg-scene"]

    # oldpkg: head's checkout has no oldpkg/ at the code root, so its worker found the editable
    # install's copy (the working tree): not head's code, so not comparable, naming both files
    c = cases["oldpkg-scene"]
    assert files["head"]["oldpkg-scene"] == str(tree / "oldpkg" / "scene.py")
    assert c["verdict"] == "not_comparable", c
    assert c["reason"].startswith("code provenance"), c["reason"]
    assert files["head"]["oldpkg-scene"] in c["reason"]
    assert files["base"]["oldpkg-scene"] in c["reason"]
    assert proc.returncode != 0, proc.stderr[-2000:]
