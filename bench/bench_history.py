"""The history at scale: ingest, check and site for 1,000 runs x 60 cases x 15 stages.

The run folders are synthetic but real: each ``report.json`` is written by the harness's own
model and writer (``bench/history_synth.py``): 60 pipeline cases of 15 stages, one measured
attempt each with 3 fingerprints and an SSIM check, steps planted in two cases (+20 % at run
400, +10 % at run 700) and a flaky period (runs 500-539). Timed, each through the code the CLI
runs:

1. ``history ingest`` of runs 0-989 (one call, as a first import of an archive), then of runs
   990-999 (a nightly ingest);
2. ``history check`` after that nightly ingest (the change points the last 10 runs brought);
3. ``history site`` (the newest 200 runs per runner class, the default), with its size.

Targets (issue 21, this 2-core machine): ingest < 60 s, check < 5 s, site < 20 s and 20 MB.

Usage::

    python bench/bench_history.py                       # synthesize into a temporary folder
    python bench/bench_history.py --runs-dir /tmp/h1000 # reuse (or create) a folder of runs
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from history_synth import write_history

from harness.history.check import check, render
from harness.history.db import open_db
from harness.history.ingest import ingest
from harness.history.site import build_site

RUNS, CASES, STAGES = 1000, 60, 15
NIGHTLY = 10


def folders(root: Path) -> list[Path]:
    runs = sorted(p for p in root.glob("run-*") if (p / "report.json").is_file())
    if len(runs) == RUNS:
        return runs
    t0 = time.perf_counter()
    print(f"synthesizing {RUNS} runs x {CASES} cases x {STAGES} stages into {root} ...")
    truth = write_history(
        root,
        runs=RUNS,
        cases=CASES,
        stages=STAGES,
        noise=0.05,
        steps={400: 1.2, 700: 1.1},
        step_cases=(0, 5),
        flaky=(500, 540),
        seed=1,
    )
    print(f"  {time.perf_counter() - t0:.1f} s")
    return truth.folders


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs-dir", type=Path, help="folder of run-NNNN folders (made if absent)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-history-") as tmp:
        root = args.runs_dir or Path(tmp) / "runs"
        runs = folders(root)
        size = sum((f / "report.json").stat().st_size for f in runs)
        print(f"{len(runs)} run folders, report.json {size / len(runs) / 1e3:.0f} kB each")
        db_path = Path(tmp) / "history.db"
        print(
            f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores: wall seconds "
            "(this process's CPU seconds: what wall time is on an idle machine)"
        )
        with contextlib.closing(open_db(db_path)) as db:
            t0, c0 = time.perf_counter(), time.process_time()
            first = ingest(db, runs[:-NIGHTLY])
            t1 = time.perf_counter()
            nightly = ingest(db, runs[-NIGHTLY:])
            t2 = time.perf_counter()
            assert not first.refused and not nightly.refused, first.refused + nightly.refused
            ingest_s, ingest_cpu = t2 - t0, time.process_time() - c0
            print(
                f"ingest: {len(runs)} runs in {ingest_s:.1f} s ({ingest_cpu:.1f} s CPU; "
                f"{t1 - t0:.1f} s for "
                f"{len(first.added)}, {t2 - t1:.2f} s for the nightly {NIGHTLY}); "
                f"{db_path.stat().st_size / 1e6:.0f} MB  [target < 60 s]"
            )
            t0, c0 = time.perf_counter(), time.process_time()
            report = check(db)
            text = render(report)
            check_s, check_cpu = time.perf_counter() - t0, time.process_time() - c0
            print(
                f"check: {check_s:.2f} s ({check_cpu:.2f} s CPU, importing scipy.stats for "
                f"Otava included), {report.series} series, "
                f"{len(report.findings)} new change point(s)  [target < 5 s]"
            )
            print("  " + text.splitlines()[0])
            t0, c0 = time.perf_counter(), time.process_time()
            site = build_site(db, Path(tmp) / "site")
            site_s, site_cpu = time.perf_counter() - t0, time.process_time() - c0
            print(
                f"site: {site_s:.1f} s ({site_cpu:.1f} s CPU), {site.pages} pages, "
                f"{site.bytes / 1e6:.1f} MB, "
                f"{site.series} series, {site.change_points} change point(s) in the newest 200 "
                "runs  [target < 20 s, < 20 MB]"
            )
        ok = ingest_s < 60 and check_s < 5 and site_s < 20 and site.bytes < 20e6
        ok_cpu = ingest_cpu < 60 and check_cpu < 5 and site_cpu < 20 and site.bytes < 20e6
        print(
            f"targets: {'met' if ok else 'MISSED'} "
            f"(in CPU seconds: {'met' if ok_cpu else 'MISSED'})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
