"""End to end: a real run fails for want of a reference, bless pins it, the next run passes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main

TARGET = """
import numpy as np
from harness import probe

def gen(shift: int = 0) -> None:
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:32, 0:32]
    base = [((x * 4 + y * 3 + t * 10) % 256)[..., None] + rng.integers(-20, 21, (32, 32, 3))
            for t in range(4)]
    probe.output("video", np.clip(np.stack(base) + shift, 0, 255).astype(np.uint8),
                 kind="video", fps=8)
    t = np.arange(8000) / 16000
    pcm = (0.5 * np.sin(2 * np.pi * 440 * t))[None].astype(np.float32)
    probe.output("audio", pcm, kind="audio", sample_rate=16000)
"""

CASE = """
id = "e2e"
kind = "pipeline"
target = "refs_e2e_target:gen"
params = {{ shift = {shift} }}
reference = "e2e"
frames = "all"

[[checks]]
metric = "ssim"
output = "video"
op = ">="
threshold = 0.98

[[checks]]
metric = "audio_snr"
output = "audio"
op = ">="
threshold = 40
"""


def _checks(run: Path) -> dict[str, bool | None]:
    report = json.loads((run / "report.json").read_text())
    attempt = report["cases"][0]["attempts"][-1]
    return {c["name"]: c["passed"] for c in attempt["checks"]}


@pytest.mark.slow
def test_run_bless_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, cases, refs, out = (tmp_path / d for d in ("code", "cases", "refs", "reports"))
    code.mkdir()
    cases.mkdir()
    refs.mkdir()
    (code / "refs_e2e_target.py").write_text(TARGET)
    case_file = cases / "e2e.toml"

    def run(run_id: str, shift: int) -> Path:
        case_file.write_text(CASE.format(shift=shift))
        argv = [
            "run",
            str(cases),
            "--code-root",
            str(code),
            "--out",
            str(out),
            "--run-id",
            run_id,
            "--references",
            str(refs),
            "-q",
        ]
        main(argv)
        return out / run_id

    first = run("r1", 0)
    assert _checks(first)["ssim(video)"] is False  # no reference yet: never a pass
    assert (
        main(
            [
                "refs",
                "bless",
                "--run",
                str(first),
                "--references",
                str(refs),
                "--reason",
                "first references",
                "--who",
                "ci",
            ]
        )
        == 0
    )
    assert main(["refs", "verify", "--references", str(refs)]) == 0

    second = run("r2", 0)
    assert _checks(second) == {
        "finite(video)": True,
        "finite(audio)": True,
        "ssim(video)": True,
        "audio_snr(audio)": True,
    }

    drifted = run("r3", 40)
    assert _checks(drifted)["ssim(video)"] is False
    capsys.readouterr()
    assert (
        main(
            [
                "refs",
                "bless",
                "--run",
                str(drifted),
                "--references",
                str(refs),
                "--reason",
                "brighter",
            ]
        )
        == 2
    )
    # no attempt passed, and the first-bless rule does not apply once a reference exists
    out = capsys.readouterr().out
    assert "may be blessed only for outputs without a reference" in out
    assert "ssim of 'video' is" in out and "e2e/any/video" in out
