"""`harness init` end to end, as a new user runs it, in a fresh folder outside this repository:
init -> run (fails: no reference yet, with the exact bless command) -> that command -> run
(green); existing files are refused by name unless --force; a PATH that is a file is refused.

Every command goes through the real CLI in a subprocess whose cwd is the new folder, with only
this checkout on PYTHONPATH (the scaffold's scenario module is found through the run's own
code root, never through the test's environment)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
SCAFFOLD = [
    "HARNESS.md",
    "cases/loader/mystack.toml",
    "cases/pipeline/mystack.toml",
    "cases/quant/mystack.toml",
    "mystack_scenarios.py",
    "runners/cpu.toml",
]
HINT = re.compile(r"no reference yet; bless with (harness refs bless .*)$", re.MULTILINE)


def harness(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def report_of(stack: Path) -> dict[str, Any]:
    return json.loads((stack / "reports" / "latest" / "report.json").read_text())


def test_init_then_run_fails_with_the_bless_command_which_makes_the_next_run_green(
    tmp_path: Path,
) -> None:
    assert not tmp_path.resolve().is_relative_to(REPO)
    init = harness("init", "mystack", cwd=tmp_path)
    assert init.returncode == 0, init.stderr
    stack = tmp_path / "mystack"
    assert files_under(stack) == SCAFFOLD
    assert "cd mystack" in init.stdout and "harness run" in init.stdout

    first = harness("run", cwd=stack)
    assert first.returncode == 1, first.stderr  # a check failed (DESIGN: exit codes)
    runs = [p.name for p in (stack / "reports").iterdir() if p.name != "latest"]
    assert len(runs) == 1
    hints = HINT.findall(first.stderr)
    assert len(hints) == 1, first.stderr
    command = shlex.split(hints[0])
    assert command == [
        *("harness", "refs", "bless", "--run", f"reports/{runs[0]}", "--case", "mystack-t2v"),
        *("--reason", "first reference"),
    ]
    statuses = {c["id"]: c["status"] for c in report_of(stack)["cases"]}
    assert statuses == {
        "mystack-load-exact": "passed",
        "mystack-quant-dispatch": "passed",
        "mystack-t2v": "failed",
    }
    # The toy model's checkpoint is a real file, written by the first run.
    assert (stack / "checkpoints" / "mystack-tiny.safetensors").stat().st_size > 0

    bless = harness(*command[1:], cwd=stack)
    assert bless.returncode == 0, bless.stdout + bless.stderr
    assert "blessed mystack-t2v/any/video (video, 8 files, new)" in bless.stdout

    second = harness("run", cwd=stack)
    assert second.returncode == 0, second.stderr
    assert "no reference yet" not in second.stderr
    report = report_of(stack)
    assert {c["id"]: c["status"] for c in report["cases"]} == dict.fromkeys(statuses, "passed")
    t2v = next(c for c in report["cases"] if c["id"] == "mystack-t2v")
    ssim = next(k for k in t2v["checks"] if k["metric"] == "ssim")
    assert ssim["passed"] is True and ssim["value"] == pytest.approx(1.0)
    attempt = t2v["attempts"][0]
    assert list(attempt["stages"]) == [
        "LoadStage",
        "TextEncodingStage",
        "LatentPreparationStage",
        "DenoisingStage",
        "VideoDecodingStage",
    ]
    steps = [f"denoise.step{i:02d}" for i in range(4)]
    assert list(attempt["fingerprints"]) == ["text.context", "latents.init", *steps]
    assert list(attempt["inputs"]) == ["checkpoint", "prompt"]
    quant = next(c for c in report["cases"] if c["id"] == "mystack-quant-dispatch")
    notes = quant["attempts"][0]["notes"]
    assert notes["dispatch.int8_mm.plan"] == notes["dispatch.int8_mm.ran"] == "dequant_matmul"


def test_init_refuses_to_overwrite_unless_forced(tmp_path: Path) -> None:
    assert harness("init", "mystack", cwd=tmp_path).returncode == 0
    stack = tmp_path / "mystack"
    edited = stack / "cases" / "quant" / "mystack.toml"
    edited.write_text("# mine\n")

    again = harness("init", "mystack", cwd=tmp_path)
    assert again.returncode == 2
    first = str(Path("mystack") / "mystack_scenarios.py")
    assert f"error: {first}: already exists, and so do" in again.stderr
    assert "pass --force to overwrite them" in again.stderr
    assert edited.read_text() == "# mine\n"

    # One clash is enough to refuse, and nothing else is written.
    fresh = tmp_path / "fresh"
    (fresh / "runners").mkdir(parents=True)
    (fresh / "runners" / "cpu.toml").write_text("# my runner\n")
    one = harness("init", cwd=fresh)
    assert one.returncode == 2
    assert "runners/cpu.toml: already exists; harness init overwrites no file" in one.stderr
    assert files_under(fresh) == ["runners/cpu.toml"]

    forced = harness("init", "mystack", "--force", cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr
    assert "[[case]]" in edited.read_text()
    assert files_under(stack) == SCAFFOLD


def test_init_refuses_a_path_that_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("not a folder\n")
    bad = harness("init", "notes.txt", cwd=tmp_path)
    assert bad.returncode == 2
    assert "error: PATH notes.txt: is a file; expected a folder" in bad.stderr
    below = harness("init", "notes.txt/stack", cwd=tmp_path)
    assert below.returncode == 2
    assert "PATH notes.txt/stack: notes.txt exists and is not a folder" in below.stderr
    assert files_under(tmp_path) == ["notes.txt"]
