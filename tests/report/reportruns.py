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


@dataclass(frozen=True)
class Reports:
    run: Path  # a real run plus the injection case, re-rendered with `harness report`
    comparison: Path  # `harness compare` of two saved real runs
    base: Path
    head: Path


def build(root: Path) -> Reports:
    base, head = run_once(root / "a"), run_once(root / "b")
    proc = harness("compare", base, head, "--out", root / "cmp", "-q")
    assert proc.returncode in (0, 1), proc.stderr
    (comparison,) = (root / "cmp").iterdir()
    run = root / "run"
    proc = subprocess.run(["cp", "-r", str(base), str(run)], check=True)
    add_injection(run)
    proc = harness("report", run)
    assert proc.returncode == 0, proc.stderr
    return Reports(run, comparison, base, head)
