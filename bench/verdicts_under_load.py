"""Verdicts of `harness compare` on tinyav while another process keeps a core busy.

Builds a scratch git repository holding a copy of tinyav (``targets/tinyav``) at a base commit
and three heads, then runs the real CLI (`harness compare --base base --head H -k t2va-int8`)
``--runs`` times per head, with a CPU hog (``while True: pass``) running beside it the whole
time, and prints each run's case verdict, the planted stage's verdict, ratio and interval:

- ``busy``: the denoising stage (``DenoisingStage``, four flow-matching steps) busy-waits 20 %
  of its own time after its work: a CPU slowdown, must be a confirmed regression every time;
- ``sleep``: the same stage sleeps 20 % of its own time: not CPU time, but still the code's
  wall time (run-queue delay is removed, a sleep is not), must be a confirmed regression;
- ``docs``: a change outside the code under test: never a regression.

    python bench/verdicts_under_load.py                  # 5 runs of each head, ~15-25 min
    python bench/verdicts_under_load.py --runs 1 --heads busy
    python bench/verdicts_under_load.py --no-hog         # the same on a quiet machine
    python bench/verdicts_under_load.py --rounds 20      # batches of up to 20 rounds

Exit 0 when every run gave what it must; 1 otherwise (the table says which).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
STAGE = "DenoisingStage"
ANCHOR = "            video, audio = self._denoise(req, video, audio, context, refs)\n"
# Planted around the denoising loop, inside DenoisingStage: the stage's own time so far, then
# 20 % more of it, busy-waiting or sleeping.
BEFORE = "            _t0 = __import__('time').perf_counter()\n"
SLOW = {
    "busy": (
        "            _dt = 0.2 * (__import__('time').perf_counter() - _t0)\n"
        "            _end = __import__('time').perf_counter() + _dt\n"
        "            while __import__('time').perf_counter() < _end:\n"
        "                pass\n"
    ),
    "sleep": (
        "            __import__('time').sleep(0.2 * (__import__('time').perf_counter() - _t0))\n"
    ),
}
MUST = {"busy": "regression", "sleep": "regression", "docs": "not regression"}


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def plant(text: str, after: str) -> str:
    """Time the denoising loop inside DenoisingStage and add ``after`` behind it."""
    assert ANCHOR in text, "tinyav's DenoisingStage changed: update bench/verdicts_under_load.py"
    return text.replace(ANCHOR, BEFORE + ANCHOR + after, 1)


def make_repo(root: Path) -> Path:
    repo = root / "repo"
    shutil.copytree(
        REPO / "targets" / "tinyav",
        repo / "targets" / "tinyav",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
    )
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    git(repo, "config", "user.email", "b@example.com")
    git(repo, "config", "user.name", "b")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    git(repo, "tag", "base")
    pipeline = repo / "targets" / "tinyav" / "tinyav" / "pipeline.py"
    original = pipeline.read_text()
    for name, after in SLOW.items():
        git(repo, "checkout", "-q", "-b", name, "base")
        pipeline.write_text(plant(original, after))
        git(repo, "commit", "-qam", name)
    git(repo, "checkout", "-q", "-b", "docs", "base")
    (repo / "NOTES.md").write_text("a docs-only change\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "docs")
    git(repo, "checkout", "-q", "base")
    return repo


def compare(
    repo: Path, head: str, out: Path, run_id: str, extra: list[str]
) -> tuple[int, dict[str, Any]]:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.cli",
            "compare",
            str(REPO / "cases" / "pipeline" / "t2va.toml"),
            "-k",
            "t2va-int8 and not pruned",
            "--base",
            "base",
            "--head",
            head,
            "--repo",
            str(repo),
            "--references",
            str(REPO / "references"),
            "--runner",
            str(REPO / "runners" / "cpu.toml"),
            "--noise-dir",
            str(out / "noise"),
            "--out",
            str(out),
            "--id",
            run_id,
            "-q",
            *extra,
        ],
        cwd=out,
        capture_output=True,
        text=True,
        check=False,
    )
    path = out / run_id / "comparison.json"
    if not path.is_file():
        raise SystemExit(f"{run_id}: no comparison.json (exit {proc.returncode}):\n{proc.stderr}")
    return proc.returncode, json.loads(path.read_text())


def hog() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--heads", default="busy,sleep,docs")
    ap.add_argument("--no-hog", action="store_true", help="no CPU hog beside the comparisons")
    ap.add_argument("--rounds", type=int, help="harness compare --rounds (default: its own)")
    ap.add_argument(
        "--runs-per-round", type=int, help="harness compare --runs-per-round (default: its own)"
    )
    args = ap.parse_args()
    heads = [h for h in args.heads.split(",") if h]
    extra = [] if args.rounds is None else ["--rounds", str(args.rounds)]
    if args.runs_per_round is not None:
        extra += ["--runs-per-round", str(args.runs_per_round)]
    print(f"harness compare {' '.join(extra) or '(defaults)'}")
    root = Path(tempfile.mkdtemp(prefix="verdicts-"))
    repo = make_repo(root)
    out = root / "runs"
    out.mkdir()
    busy = None if args.no_hog else hog()
    print(
        f"{'head':6} {'run':>3} {'exit':>4} {'case verdict':14} {STAGE + ' verdict':34} "
        f"{'ratio':>6} {'interval':>15} {'rounds':>6} {'s':>5}  ok"
    )
    bad = 0
    try:
        for run in range(args.runs):
            for head in heads:
                t0 = time.monotonic()
                code, doc = compare(repo, head, out, f"{head}-{run}", extra)
                (case,) = [c for c in doc["cases"] if c["id"] == "t2va-int8"]
                st = next((s for s in case["latency"] if s["stage"] == STAGE), {})
                ok = (
                    case["verdict"] == "regression"
                    if MUST[head] == "regression"
                    else case["verdict"] != "regression"
                )
                bad += not ok
                interval = (
                    f"[{st['ci_low']:.3f}, {st['ci_high']:.3f}]"
                    if isinstance(st.get("ci_low"), float) and isinstance(st.get("ci_high"), float)
                    else "-"
                )
                ratio = st.get("ratio")
                ratio_s = f"{ratio:.3f}" if isinstance(ratio, float) else "-"
                stage = st.get("verdict", "-")
                if st.get("confirmation"):
                    stage += f" / {st['confirmation']}"
                took = time.monotonic() - t0
                print(
                    f"{head:6} {run:>3} {code:>4} {case['verdict']:14} {stage:34} "
                    f"{ratio_s:>6} {interval:>15} {case['rounds']:>6} {took:5.0f}  "
                    f"{'yes' if ok else 'NO'}",
                    flush=True,
                )
                if not ok or os.environ.get("VERBOSE"):
                    print(f"       reason: {case.get('reason')}", flush=True)
    finally:
        if busy is not None:
            busy.kill()
    print(f"\n{'all as they must be' if not bad else f'{bad} run(s) wrong'}; folders: {out}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
