"""One clip, the same MP4 bytes in every process: ``harness.media.write_mp4`` and tinyav's
writer, in fresh interpreters that have imported torch (as a worker has).

On an AVX-512 runner (2026-12-04) libx264's AVX-512 assembly wrote a different file of one
clip in each of six such processes; :func:`harness.media.mp4_video_options` holds it to AVX2
there. On a CPU without AVX-512 the options are unchanged and this test checks the same
determinism all the same."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from bareenv import bare_env

from harness import media

REPO = Path(__file__).resolve().parents[2]
# tinyav.serve's answer at TP 1 to tests/serve's request (8 frames of 32 x 32): decoded, the
# frames whose MP4 varied from process to process; random or smooth synthetic clips did not
CLIP = Path(__file__).parent / "data" / "fox-tp1.mp4"

WRITE = """
import hashlib, sys, tempfile
from pathlib import Path
import numpy as np
import torch  # loaded, as in a worker: the AVX-512 code's bytes varied then
from harness import media
from tinyav import media as tinyav_media

frames = media.decode_video(sys.argv[1]).frames
pcm = (np.sin(np.arange(16000, dtype=np.float32) / 10.0) * 0.3).astype(np.float32)
with tempfile.TemporaryDirectory() as tmp:  # removed after: four processes per run
    out = Path(tmp)
    a = media.write_mp4(out / "h.mp4", frames, pcm, fps=8)
    b = tinyav_media.write_mp4(out / "t.mp4", frames, pcm, fps=8)
    print(hashlib.sha256(a.read_bytes()).hexdigest(), hashlib.sha256(b.read_bytes()).hexdigest())
"""


def test_one_clip_is_the_same_mp4_in_every_process() -> None:
    env_path = f"{REPO}:{REPO / 'targets' / 'tinyav'}"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITE, str(CLIP)],
            cwd=REPO,
            env=bare_env(PYTHONPATH=env_path),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
        outs.append(tuple(out.split()))
    assert len(set(outs)) == 1, outs


def test_avx512_holds_libx264_to_avx2_and_nothing_else_changes(tmp_path: Path) -> None:
    with_avx512 = tmp_path / "cpuinfo-avx512"
    with_avx512.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx avx2 avx512f avx512bw\n")
    avx2_only = tmp_path / "cpuinfo-avx2"
    avx2_only.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma\n")
    assert media.mp4_video_options(str(with_avx512)) == {
        **media.MP4_VIDEO_OPTIONS,
        "x264-params": "asm=avx2",
    }
    assert media.mp4_video_options(str(avx2_only)) == media.MP4_VIDEO_OPTIONS
    assert media.mp4_video_options(str(tmp_path / "none")) == media.MP4_VIDEO_OPTIONS
