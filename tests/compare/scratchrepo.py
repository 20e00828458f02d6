"""A scratch git repository for the comparison end-to-end tests: tinyav at a base commit and
one branch per planted change (what each head changes is in ``HEADS``)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
CASE = "pipeline/t2va-int8[cpu]"
BAD = "pipeline/t2va-bad-steps[cpu]"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{path}: {old!r} not found (tinyav changed?)"
    path.write_text(text.replace(old, new, 1))


def t2va_target() -> str:
    """The default case's target as the working copy's case file spells it."""
    text = (REPO / "cases" / "pipeline" / "t2va.toml").read_text()
    m = re.search(r'^target = "([^"]+)"', text, re.M)
    assert m, "cases/pipeline/t2va.toml names no target"
    return m.group(1)


# head name -> (file under targets/tinyav/tinyav, old text, new text)
HEADS: dict[str, tuple[str, str, str]] = {
    "slow-stage": (
        "pipeline.py",
        '        with probe.stage("VideoDecodingStage"), torch.no_grad():\n',
        '        with probe.stage("VideoDecodingStage"), torch.no_grad():\n'
        '            __import__("time").sleep(0.3)\n',
    ),
    "denoiser": ("pipeline.py", "video = video + dt * v\n", "video = video + dt * v * 1.01\n"),
    "seeding": (
        "pipeline.py",
        "torch.Generator().manual_seed(req.seed)",
        "torch.Generator().manual_seed(req.seed + 1)",
    ),
    "nan-audio": (
        "pipeline.py",
        "[0, :n].numpy()\n",
        '[0, :n].numpy()\n            pcm[7] = float("nan")\n',
    ),
    "adaln-swap": (
        "model.py",
        "shift1, scale1, gate1, shift2, scale2, gate2 = mod",
        "scale1, shift1, gate1, shift2, scale2, gate2 = mod",
    ),
}


def make_scratch(root: Path) -> dict[str, Any]:
    """A git repository with tinyav at a base commit and one branch per planted change, and a
    work folder with the case files (the default case plus one that fails on every side)."""
    repo = root / "repo"
    shutil.copytree(
        REPO / "targets" / "tinyav",
        repo / "targets" / "tinyav",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
    )
    git(repo.parent, "init", "-q", str(repo))
    git(repo, "config", "user.email", "t@example.com")
    git(repo, "config", "user.name", "t")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    git(repo, "tag", "base")
    pkg = repo / "targets" / "tinyav" / "tinyav"
    for name, (file, old, new) in HEADS.items():
        git(repo, "checkout", "-q", "-b", name, "base")
        edit(pkg / file, old, new)
        git(repo, "commit", "-qam", name)
    git(repo, "checkout", "-q", "-b", "no-change", "base")
    (repo / "NOTES.txt").write_text("a change outside the code under test\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "notes only")
    git(repo, "checkout", "-q", "base")
    work = root / "work"
    (work / "cases").mkdir(parents=True)
    shutil.copy(REPO / "cases" / "pipeline" / "t2va.toml", work / "cases" / "t2va.toml")
    (work / "cases" / "bad.toml").write_text(
        f'id = "t2va-bad-steps"\nkind = "pipeline"\ntarget = "{t2va_target()}"\n'
        'params = { quant = "int8", steps = 0 }\nseed = 42\ntimeout_s = 60\n'
    )
    return {"repo": repo, "work": work, "runs": root / "runs"}
