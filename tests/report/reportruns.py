"""Helpers of the report tests: real runs of the bundled target, a comparison of two of them,
and a synthetic case whose every string is an HTML injection attempt.

A module with a unique name, not conftest: several test folders have a conftest.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from harness.fsio import read_array, write_array
from harness.model import Attempt, CaseResult, CheckResult, ErrorInfo

REPO = Path(__file__).resolve().parents[2]
INJECTION = "<script>alert(1)</script>"
CASE = "t2va-int8 and not pruned"  # one real pipeline case: video, audio and an MP4


def harness(*args: str | Path, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), *sys.path])},
    )


def run_once(out: Path) -> Path:
    """A real `harness run` of one tinyav pipeline case; its run folder."""
    proc = harness("run", "cases/pipeline", "-k", CASE, "--out", out)
    # 1: on a loaded machine the case's latency budget can fail; the report is what matters
    assert proc.returncode in (0, 1), proc.stderr
    (run_dir,) = [p for p in out.iterdir() if p.is_dir() and not p.is_symlink()]
    assert (run_dir / "index.html").is_file(), "harness run writes the HTML report"
    return run_dir


def injection_case() -> CaseResult:
    """A failed case whose id, reason, check, error, stack and note all carry markup."""
    error = ErrorInfo.make(
        "ValueError",
        f"{INJECTION} <img src=x onerror=alert(2)>; log: /elsewhere/workers/evil-cpu-001.log",
        "</pre><script>alert(3)</script>",
    )
    check = CheckResult(
        name=f"note.{INJECTION}",
        metric="note.x",
        value="<b onmouseover=alert(4)>x</b>",
        op="==",
        threshold="y",
        policy="fail",
        passed=False,
        reason=f"{INJECTION} differs",
    )
    attempt = Attempt(
        case_id=INJECTION,
        platform="cpu",
        index=0,
        status="failed",
        seed=1,
        stages={INJECTION: 0.5},
        inputs={INJECTION: "blake3:00"},
        fingerprints={
            INJECTION: {
                "hash": INJECTION,
                "dtype": "<i>",
                "shape": [1],
                "nonfinite": 0,
                "min": 0.0,
                "max": 0.0,
                "mean": 0.0,
            }
        },
        notes={INJECTION: INJECTION},
        error=error,
        duration_s=9.5,  # the longest case, so sorting by seconds puts it last
        started_at="2026-01-01T00:00:00+00:00",
    )
    return CaseResult(
        id=INJECTION,
        kind="loader",
        platform="cpu",
        status="failed",
        source=f"cases/{INJECTION}.toml",
        reason=f"{INJECTION} failed",
        checks=(check,),
        attempts=(attempt,),
        seed=1,
    )


def add_injection(run_dir: Path) -> None:
    """Append :func:`injection_case` to the run's report.json, and a worker log it names."""
    path = run_dir / "report.json"
    doc = json.loads(path.read_text())
    doc["cases"].append(injection_case().to_json())
    doc["summary"]["failed"] += 1
    path.write_text(json.dumps(doc, indent=2))
    (run_dir / "workers").mkdir(exist_ok=True)
    (run_dir / "workers" / "evil-cpu-001.log").write_text(f"worker says {INJECTION}\n")


def nudge_video(run_dir: Path) -> None:
    """Add 1 (of 255) to the top rows of every saved video frame of a run: a difference a heat
    map on a 0-255 scale draws as a black square (the exact-GELU head's 89 -> 68 dB)."""
    for path in run_dir.glob("outputs/*/*/video.safetensors"):
        frames = np.asarray(read_array(path)).copy()
        top = frames[:, :4]
        frames[:, :4] = np.where(top < 255, top + 1, top - 1)
        write_array(path, frames)


@dataclass(frozen=True)
class Reports:
    run: Path  # a real run plus the injection case, re-rendered with `harness report`
    comparison: Path  # `harness compare` of two saved real runs, head's frames nudged by 1/255
    base: Path
    head: Path


def build(root: Path) -> Reports:
    base, head = run_once(root / "a"), run_once(root / "b")
    nudge_video(head)
    proc = harness("compare", base, head, "--out", root / "cmp", "-q")
    assert proc.returncode in (0, 1), proc.stderr
    (comparison,) = (root / "cmp").iterdir()
    run = root / "run"
    proc = subprocess.run(["cp", "-r", str(base), str(run)], check=True)
    add_injection(run)
    proc = harness("report", run)
    assert proc.returncode == 0, proc.stderr
    return Reports(run, comparison, base, head)
