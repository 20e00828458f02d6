"""A scratch git repository for the quality end-to-end tests: a tiny numpy target that renders
9 frames of 32x32 RGB and 0.2 s of 16 kHz audio, one branch per planted quality change
(``HEADS``), and a reference store blessed from base's run on this CPU (the ``any`` class,
as the bundled references are).

The case checks first, middle and last frame (the default frame selection), so a head that
breaks only the frames in between passes every check of its own.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from scratchrepo import REPO, edit, git

CASE = "pipeline/clip[cpu]"

TARGET = '''"""Renders a tiny clip: 9 frames of 32x32 RGB and 0.2 s of 16 kHz audio."""

import numpy as np

from harness import probe

RATE = 16000


def render() -> None:
    rng = np.random.default_rng(7)
    video = rng.integers(0, 256, (9, 32, 32, 3), dtype=np.uint8)
    audio = (0.5 * np.sin(2 * np.pi * 440.0 * np.arange(RATE // 5) / RATE)).astype(np.float32)
    flavour = (probe.platform_info() or {}).get("fp8")
    with probe.stage("render"):
        video, audio = finish(video, audio, flavour)
    probe.output("video", video, kind="video", fps=8)
    probe.output("audio", audio, kind="audio", sample_rate=RATE)


def finish(video, audio, flavour):
    if flavour == "e4m3fnuz":  # MI300-class rounding: the low bit of every level is lost
        video = video & 0xFE
    return video, audio
'''

CASE_FILE = """id = "clip"
kind = "pipeline"
target = "tinymedia:render"
reference = "clip"
seed = 1
timeout_s = 60
platforms = "any"
[[checks]]
metric = "psnr"
output = "video"
op = ">="
threshold = 30.0
[[checks]]
metric = "mae"
output = "video"
op = "<="
threshold = 1.5
[[checks]]
metric = "audio_snr"
output = "audio"
op = ">="
threshold = 20.0
"""

_FINISH = "    return video, audio\n"
# head name -> (old text, new text) in tinymedia/__init__.py
HEADS: dict[str, tuple[str, str]] = {
    # every frame but the checked ones (0, 4, 8) black
    "blackout": (
        _FINISH,
        "    video = video.copy()\n    video[1:4] = 0\n    video[5:8] = 0\n" + _FINISH,
    ),
    # a faint tone on top: 34 dB SNR, over the check's 20 dB
    "audio-hiss": (
        _FINISH,
        "    audio = audio + np.float32(0.01) * np.cos(np.arange(audio.size) * 1.3).astype("
        "np.float32)\n" + _FINISH,
    ),
    # the CPU's e4m3fn whatever the platform: wrong on MI300-class HIP
    "fp8-flavour": (
        'flavour = (probe.platform_info() or {}).get("fp8")',
        'flavour = "e4m3fn"',
    ),
}


def harness(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def make_media_repo(root: Path) -> dict[str, Any]:
    """The repository (base and one branch per head), the case folder, and the store."""
    repo, work, store, runs = root / "repo", root / "work", root / "refs", root / "runs"
    pkg = repo / "src" / "tinymedia"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(TARGET)
    git(root, "init", "-q", str(repo))
    git(repo, "config", "user.email", "t@example.com")
    git(repo, "config", "user.name", "t")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    git(repo, "tag", "base")
    for name, (old, new) in HEADS.items():
        git(repo, "checkout", "-q", "-b", name, "base")
        edit(pkg / "__init__.py", old, new)
        git(repo, "commit", "-qam", name)
    git(repo, "checkout", "-q", "base")
    (work / "cases").mkdir(parents=True)
    (work / "cases" / "clip.toml").write_text(CASE_FILE)
    store.mkdir()
    # base's own run on this CPU, blessed: without a reference every quality check fails,
    # which is what a first bless takes
    run = harness(
        work, "run", "cases", "--code-root", str(repo / "src"), "--references", str(store),
        "--runner", str(REPO / "runners" / "cpu.toml"), "--out", str(runs), "--run-id",
        "bless-src", "-q",
    )  # fmt: skip
    assert (runs / "bless-src" / "report.json").is_file(), run.stderr[-3000:]
    bless = harness(
        work, "refs", "bless", "--run", str(runs / "bless-src"), "--references", str(store),
        "--reason", "base of the quality scratch repository", "--who", "t",
    )  # fmt: skip
    assert bless.returncode == 0, bless.stderr[-3000:] + bless.stdout[-3000:]
    return {"repo": repo, "work": work, "store": store, "runs": runs}
