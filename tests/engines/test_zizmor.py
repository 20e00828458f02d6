"""The GitHub Actions workflows we hand users are safe to copy: ``zizmor --offline`` (static
analysis of workflows) with its most suspicious persona finds nothing above informational in
the example workflow (runners/ci/github-actions.yml) or in any ``harness plan --emit github``
output."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

import harness
from harness.cli import main
from harness.cli.emit.github import PINS

REPO = Path(harness.__file__).resolve().parent.parent
WORKFLOW = REPO / "runners" / "ci" / "github-actions.yml"
ZIZMOR = shutil.which("zizmor")
pytestmark = pytest.mark.skipif(ZIZMOR is None, reason="zizmor not installed (dev extra)")


def zizmor(*paths: Path) -> list[dict[str, Any]]:
    """Every finding of ``zizmor --offline --persona auditor`` on ``paths``."""
    assert ZIZMOR is not None
    proc = subprocess.run(
        [ZIZMOR, "--offline", "--persona", "auditor", "--format", "json", *map(str, paths)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.stdout.strip(), proc.stderr  # zizmor's exit code is its worst finding
    findings: list[dict[str, Any]] = json.loads(proc.stdout)
    return findings


# What the auditor persona flags by design of a GPU plan: its jobs run on the team's own
# (self-hosted) accelerator runners. The default persona does not report it.
BY_DESIGN = {"self-hosted-runner"}


def _above_informational(findings: list[dict[str, Any]]) -> list[str]:
    return [
        f"{f['ident']} ({f['determinations']['severity']}): {f['desc']}"
        for f in findings
        if f["determinations"]["severity"] not in ("Informational", "Unknown")
        and f["ident"] not in BY_DESIGN
    ]


def test_the_example_and_every_emitted_workflow_pass_zizmor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(REPO)
    emitted = []
    image = "registry.example/stack@sha256:" + "0" * 64  # pinned by digest, as --help says
    for name, extra in (("cpu", []), ("h100", ["--runner", "h100", "--image", image])):
        assert main(["plan", "cases/loader", "--shards", "2", "--emit", "github", *extra]) == 0
        path = tmp_path / f"{name}.yml"
        path.write_text(capsys.readouterr().out)
        emitted.append(path)
    assert _above_informational(zizmor(WORKFLOW, *emitted)) == []

    # the example pins the same commits as the emitter, each with its release in a comment
    text = WORKFLOW.read_text(encoding="utf-8")
    for action, (commit, tag) in PINS.items():
        assert f"uses: {action}@{commit}  # {tag}" in text, action

    # and zizmor does see what it is there for: a tag instead of a commit, a kept token
    unsafe = tmp_path / "unsafe.yml"
    unsafe.write_text(
        emitted[0].read_text().replace("persist-credentials: false", "persist-credentials: true")
    )
    unsafe.write_text(unsafe.read_text().replace(f"@{PINS['actions/checkout'][0]}", "@v4", 1))
    found = {f["ident"] for f in zizmor(unsafe)}
    assert {"unpinned-uses", "artipacked"} <= found, found
