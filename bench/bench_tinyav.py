"""How long the default tinyav case takes on this machine, through the harness.

Runs ``pipeline/t2va-int8`` (INT8 ConvRot checkpoint, 4 steps, 16 frames of 64x64, 2 s of
audio, MP4 export) with a few repeats and prints each attempt's wall time and the median per
stage, read back from the run's report.json. The issue's bar: under 3 s on two CPU cores.

    python bench/bench_tinyav.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as out:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "harness.cli",
                "run",
                "cases/pipeline/t2va.toml",
                "-q",
                "-k",
                "t2va-int8 and not pruned",
                "--repeats",
                str(args.repeats),
                "--out",
                out,
                "--run-id",
                "bench",
            ],
            cwd=REPO,
            check=True,
        )
        doc = json.loads((Path(out) / "bench" / "report.json").read_text())
    (case,) = doc["cases"]
    durations = [a["duration_s"] for a in case["attempts"]]
    print(
        f"{case['kind']}/{case['id']}[{case['platform']}]: {case['status']}, "
        f"worker threads {doc['env'].get('worker_threads')}"
    )
    print("attempt wall times (s): " + ", ".join(f"{d:.3f}" for d in durations))
    stages: dict[str, list[float]] = {}
    for a in case["attempts"]:
        for name, secs in a["stages"].items():
            stages.setdefault(name, []).append(secs)
    for name, secs in stages.items():
        if ".step" not in name:
            print(f"  {name:24} median {statistics.median(secs) * 1000:8.1f} ms")
    worst = max(durations)
    print(
        f"slowest attempt {worst:.3f} s: "
        + ("under" if worst < 3 else "NOT under")
        + " the 3 s bar"
    )


if __name__ == "__main__":
    main()
