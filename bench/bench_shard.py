"""Sharding and merging, measured: how even the split is, and how fast a merge is.

1. Balance: the bundled suite (cases/) split over N shards with the durations one real
   ``harness run`` recorded (``bench/data/tinyav-durations.json``). Printed per N: the longest
   shard over the ideal (total / N, or the largest batch when that is longer; 1.000 is
   perfect), for the harness's split (by case and by file) and for pytest-split's two
   duration-based algorithms (``least_duration``, ``duration_based_chunks``, its default) on
   the same durations. Target: the harness's longest shard within 10 % of the ideal.
2. Merge: the bundled suite's 49 cases in 10 synthetic shard reports, each attempt shaped like
   the real ones (a pipeline attempt: 13 stages, 13 fingerprints, 15 checks; every tenth case
   failed with a traceback), written by the real writers; timed: reading them (JSON + schema),
   merging, and writing the merged run folder (``write_run``). Target: < 1 s. ``--stress``
   adds 1000 pipeline cases x 3 attempts in 10 shards, for scale.
3. A fleet (issue 22): 100 shards of 50 pipeline-shaped cases, read and schema-checked as
   ``harness merge`` reads them and merged; target < 5 s (wall, median; CPU seconds printed
   beside it, as a loaded machine's wall time is not the code's). Each report read on its own
   is timed beside it, and the merged folder's renderings once, apart.

Usage::

    python bench/bench_shard.py                       # all three
    python bench/bench_shard.py --fleet-only          # the fleet of 100 shards alone
    python bench/bench_shard.py --record reports/RUN  # refresh the durations from a real run
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from harness.cases import PlanItem, build_plan, load_suite
from harness.cases.shard import Recorded, recorded_durations, split
from harness.fsio import write_json_atomic
from harness.model import Attempt, Case, CaseResult, CheckResult, ErrorInfo, RunReport
from harness.report.io import read_report, write_run
from harness.report.merge import merge_reports
from harness.report.shard_io import read_shard_reports

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "bench" / "data" / "tinyav-durations.json"


# --- balance -------------------------------------------------------------------------------


def load_durations(path: Path = DATA) -> dict[tuple[str, str], Recorded]:
    doc = json.loads(path.read_text())
    return {
        (c["id"], c["platform"]): Recorded(c["kind"], c["seconds"], c["runs"]) for c in doc["cases"]
    }


def record(run: Path, path: Path = DATA) -> None:
    report = read_report(run)
    rec = recorded_durations([report])
    sha = str(report.env.get("git", {}).get("sha", "?"))[:12]
    lines = [
        json.dumps(
            {"id": k[0], "platform": k[1], "kind": v.kind, "seconds": round(v.seconds, 4)}
            | {"runs": v.runs}
        )
        for k, v in sorted(rec.items())
    ]
    about = (
        "Seconds per case (all attempts summed) of one `harness run` of the bundled suite "
        f"(cases/, runner {report.runner}), git {sha}, {report.started_at[:10]}. Regenerate: "
        "python bench/bench_shard.py --record reports/<run>."
    )
    path.write_text(
        '{\n "about": '
        + json.dumps(about)
        + ',\n "cases": [\n  '
        + ",\n  ".join(lines)
        + "\n ]\n}\n"
    )
    print(f"wrote {len(lines)} case durations to {path}")


@dataclass
class _Node:
    """What pytest-split's algorithms read from a pytest item: its node id."""

    nodeid: str


def pytest_split_max(algorithm: str, names: list[str], seconds: dict[str, float], n: int) -> float:
    from pytest_split.algorithms import Algorithms

    groups = Algorithms[algorithm].value(n, [_Node(x) for x in names], seconds)  # type: ignore[arg-type]
    return max(sum(seconds[i.nodeid] for i in g.selected) for g in groups)


def balance(shard_counts: list[int]) -> bool:
    durations = load_durations()
    suite = load_suite([ROOT / "cases"])
    items = build_plan(suite.cases, ["cpu"])
    seconds = {it.name: durations[(it.case.id, it.platform)].seconds for it in items}
    names = [it.name for it in items]
    total = sum(seconds.values())
    print(
        f"balance: {len(items)} cases of the bundled suite, {total:.2f} s recorded "
        f"(largest case {max(seconds.values()):.2f} s); longest shard / ideal"
    )
    print(
        f"{'N':>3} {'ideal s':>8}  {'by case':>8} {'by file':>8} {'(file s)':>9}  "
        f"{'ps-least':>8} {'ps-chunks':>9}"
    )
    ok = True
    for n in shard_counts:
        by_case = split(items, n, durations)
        by_file = split(items, n, durations, by="file")
        ideal = by_case.ideal_s()
        ratios = [
            max(by_case.loads()) / ideal,
            max(by_file.loads()) / by_file.ideal_s(),
            pytest_split_max("least_duration", names, seconds, n) / ideal,
            pytest_split_max("duration_based_chunks", names, seconds, n) / ideal,
        ]
        ok &= ratios[0] <= 1.10
        print(
            f"{n:>3} {ideal:>8.2f}  {ratios[0]:>8.3f} {ratios[1]:>8.3f} "
            f"{max(by_file.loads()):>8.2f}s  {ratios[2]:>8.3f} {ratios[3]:>9.3f}"
        )
    print(
        "  (by file: over its own ideal, the largest case file when that is longer than "
        "total / N; file s: its longest shard; ps = pytest-split on the same per-case seconds)"
    )
    print(f"balance target (by case <= 1.10 x ideal for every N): {'met' if ok else 'MISSED'}")
    return ok


# --- merge ---------------------------------------------------------------------------------

# Attempt shapes as the bundled suite records them (report.json of a real run): a pipeline
# attempt has 13 stages, 13 fingerprints and 15 checks; a loader or quant attempt a few notes
# and checks and no fingerprints.
SHAPES: dict[str, tuple[int, int, int]] = {"pipeline": (13, 13, 15), "other": (1, 0, 3)}


def _attempt(cid: str, kind: str, index: int, failed: bool) -> Attempt:
    n_stages, n_prints, n_checks = SHAPES["pipeline" if kind == "pipeline" else "other"]
    stages = {f"stage{s:02d}": 0.01 * (index + 1) for s in range(n_stages)}
    prints = {
        f"stage{s:02d}.out": {
            "hash": f"blake3:{index:064x}",
            "dtype": "float32",
            "shape": [1, 16, 8, 8],
            "nonfinite": 0,
            "min": -1.0,
            "max": 1.0,
            "mean": 0.0,
        }
        for s in range(n_prints)
    }
    checks = tuple(
        CheckResult(f"m{m}(video)", "ssim", 0.97, ">=", 0.95, "fail", not failed, output="video")
        for m in range(n_checks)
    )
    error = (
        ErrorInfo.make("AssertionError", f"{cid}: ssim 0.80 < 0.95", "Traceback ...\n" * 20)
        if failed
        else None
    )
    return Attempt(
        case_id=cid,
        platform="cpu",
        index=index,
        status="failed" if failed else "passed",
        seed=42,
        repeat=index,
        inputs={"prompt": "blake3:" + "a" * 64, "checkpoint": "blake3:" + "b" * 64},
        stages=stages,
        fingerprints=prints,
        metrics={"ssim": 0.97, "psnr": 38.2},
        outputs={
            "video": {"kind": "video", "hash": "blake3:" + "c" * 64, "path": f"outputs/{cid}/v"}
        }
        if kind == "pipeline"
        else {},
        checks=checks,
        error=error,
        duration_s=0.5,
        worker_pid=1234,
        started_at="2026-01-01T00:00:00+00:00",
    )


def synthetic_shards(
    root: Path,
    items: list[PlanItem],
    shards: int,
    attempts_of: dict[str, int],
    *,
    renderings: bool = True,
) -> list[Path]:
    """``shards`` shard run folders of ``items`` (split by the real splitter), each case with
    ``attempts_of[kind]`` attempts (default 1); every tenth case failed."""
    plan = split(
        items, shards, {(it.case.id, it.platform): Recorded(it.case.kind, 1.0, 1) for it in items}
    )
    dirs = []
    for index in range(1, shards + 1):
        cases = []
        for n, it in enumerate(plan.items_of(index)):
            failed = n % 10 == 0
            count = attempts_of.get(it.case.kind, attempts_of.get("*", 1))
            attempts = tuple(_attempt(it.case.id, it.case.kind, a, failed) for a in range(count))
            cases.append(
                CaseResult(
                    it.case.id,
                    it.case.kind,
                    it.platform,
                    "failed" if failed else "passed",
                    source=it.case.source,
                    checks=attempts[-1].checks,
                    attempts=attempts,
                    seed=42,
                    repeats=count,
                )
            )
        report = RunReport(
            run_id=f"shard-{index}",
            started_at="2026-01-01T00:00:00+00:00",
            finished_at="2026-01-01T00:10:00+00:00",
            argv=("harness", "run", "--shard", f"{index}/{shards}"),
            runner="cpu",
            env={"error": "no worker started; environment not collected"},
            cases=tuple(cases),
            shard=plan.info(index),
        )
        d = root / f"shard-{index}"
        d.mkdir()
        if renderings:
            write_run(report, d, latest=False)
        else:  # what merge reads; the HTML of 100 shards would only slow the set-up
            write_json_atomic(d / "report.json", report.to_json(), indent=None)
        dirs.append(d)
    return dirs


def bench_merge(
    label: str, items: list[PlanItem], attempts_of: dict[str, int], rounds: int, shards: int = 10
) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        dirs = synthetic_shards(Path(tmp), items, shards, attempts_of, renderings=shards <= 10)
        size = sum((d / "report.json").stat().st_size for d in dirs)
        phases: dict[str, list[float]] = {"read": [], "merge": [], "write": [], "total": []}
        cpu: list[float] = []  # this process's CPU seconds for read + merge: what load hides
        for r in range(rounds):
            c0 = time.process_time()
            t0 = time.perf_counter()
            # as `harness merge` reads them: each distinct plan checked once
            reports = list(zip(map(str, dirs), read_shard_reports(dirs), strict=True))
            t1 = time.perf_counter()
            merged = merge_reports(reports, run_id="merged")
            t2 = time.perf_counter()
            cpu.append(time.process_time() - c0)
            out = Path(tmp) / f"merged-{r}"
            out.mkdir()
            write_run(merged, out, latest=False)
            t3 = time.perf_counter()
            for k, v in zip(phases, (t1 - t0, t2 - t1, t3 - t2, t3 - t0), strict=True):
                phases[k].append(v)
        assert len(merged.cases) == len(items) and not merged.missing
    med = {k: statistics.median(v) for k, v in phases.items()}
    print(
        f"merge, {label}: {shards} shard reports, {len(items)} cases, {size / 1e6:.2f} MB of "
        f"report.json; median of {rounds}: read (JSON + schema) {med['read']:.3f} s, merge "
        f"{med['merge']:.3f} s, write {med['write']:.3f} s, total {med['total']:.3f} s; "
        f"read + merge {med['read'] + med['merge']:.3f} s ({statistics.median(cpu):.3f} CPU s)"
    )
    return med["total"] if shards <= 10 else med["read"] + med["merge"]


def bench_fleet(rounds: int) -> bool:
    """A fleet (issue 22): 100 shards of 50 cases, each case one pipeline-shaped attempt (13
    stages, 13 fingerprints, 15 checks), every shard's report carrying the whole plan of 5000
    cases. Timed, ``rounds`` times: reading them as ``harness merge`` does (each plan checked
    and parsed once), and beside it each report read on its own as ``read_report`` does (the
    whole plan decoded and checked every time); then the merge; the merged run folder's
    renderings once, apart (the bar is on reading, checking and merging)."""
    fleet = [
        PlanItem(Case(id=f"case-{i:04d}", kind="pipeline", source="cases/p.toml"), "cpu")
        for i in range(5000)
    ]
    with tempfile.TemporaryDirectory() as tmp:
        dirs = synthetic_shards(Path(tmp), fleet, 100, {"*": 1}, renderings=False)
        size = sum((d / "report.json").stat().st_size for d in dirs)
        wall: dict[str, list[float]] = {"shards": [], "one by one": [], "merge": []}
        cpu: dict[str, list[float]] = {k: [] for k in wall}
        for _ in range(rounds):
            c0, t0 = time.process_time(), time.perf_counter()
            reports = read_shard_reports(dirs)
            c1, t1 = time.process_time(), time.perf_counter()
            merged = merge_reports(list(zip(map(str, dirs), reports, strict=True)))
            c2, t2 = time.process_time(), time.perf_counter()
            del reports
            c3, t3 = time.process_time(), time.perf_counter()
            singles = [read_report(d) for d in dirs]
            c4, t4 = time.process_time(), time.perf_counter()
            del singles
            for k, (w, c) in {
                "shards": (t1 - t0, c1 - c0),
                "merge": (t2 - t1, c2 - c1),
                "one by one": (t4 - t3, c4 - c3),
            }.items():
                wall[k].append(w)
                cpu[k].append(c)
        assert len(merged.cases) == len(fleet) and not merged.missing
        out = Path(tmp) / "merged"
        out.mkdir()
        c5, t5 = time.process_time(), time.perf_counter()
        write_run(merged, out, latest=False)
        c6, t6 = time.process_time(), time.perf_counter()
        written = {f.name: f.stat().st_size for f in out.iterdir() if f.is_file()}

    def fig(k: str) -> str:
        return (
            f"{statistics.median(wall[k]):.2f} s wall (min {min(wall[k]):.2f}), "
            f"{statistics.median(cpu[k]):.2f} CPU s"
        )

    read_merge = [a + b for a, b in zip(wall["shards"], wall["merge"], strict=True)]
    read_merge_cpu = [a + b for a, b in zip(cpu["shards"], cpu["merge"], strict=True)]
    print(
        f"merge, a fleet: 100 shard reports x 50 pipeline cases, {size / 1e6:.0f} MB of "
        f"report.json; median of {rounds}:\n"
        f"  read + schema check, as harness merge (each plan once): {fig('shards')}\n"
        f"  merge (plan, coverage): {fig('merge')}\n"
        f"  read + schema check + merge: {statistics.median(read_merge):.2f} s wall (min "
        f"{min(read_merge):.2f}), {statistics.median(read_merge_cpu):.2f} CPU s\n"
        f"  beside it, each report read on its own (read_report): {fig('one by one')}\n"
        f"  writing the merged run folder once (report.json, junit.xml, summary.md, "
        f"index.html; {sum(written.values()) / 1e6:.0f} MB): {t6 - t5:.1f} s wall, "
        f"{c6 - c5:.1f} CPU s (timed apart)"
    )
    ok = statistics.median(read_merge) < 5.0
    print(
        "merge target (< 5 s to read, schema-check and merge 100 shards of 50 cases, wall, "
        f"median): {'met' if ok else 'MISSED'}"
        + (
            ""
            if ok or statistics.median(read_merge_cpu) >= 5.0
            else " (CPU met: a loaded machine?)"
        )
    )
    return ok


def merge_benches(stress: bool, fleet_rounds: int) -> bool:
    suite = load_suite([ROOT / "cases"])
    bundled = build_plan(suite.cases, ["cpu"])
    # The bundled suite as CI would shard it: a pipeline case has its 2 repeats, others 1.
    total = bench_merge("the bundled suite's 49 cases", bundled, {"pipeline": 2}, rounds=5)
    ok = total < 1.0
    print(f"merge target (< 1 s, bundled suite in 10 shards): {'met' if ok else 'MISSED'}")
    if stress:
        big = [
            PlanItem(Case(id=f"case-{i:04d}", kind="pipeline", source="cases/p.toml"), "cpu")
            for i in range(1000)
        ]
        bench_merge("stress, 1000 pipeline cases x 3 attempts", big, {"*": 3}, rounds=1)
    return bench_fleet(fleet_rounds) and ok


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--record", type=Path, metavar="RUN", help="refresh the durations data from a run"
    )
    p.add_argument("--shards", type=int, nargs="+", default=[2, 3, 4, 6, 8])
    p.add_argument(
        "--stress", action="store_true", help="also merge 1000 pipeline cases x 3 attempts"
    )
    p.add_argument(
        "--fleet-only",
        action="store_true",
        help="only the fleet: 100 shards of 50 cases (issue 22's bar)",
    )
    p.add_argument("--rounds", type=int, default=3, help="rounds of the fleet's read and merge")
    args = p.parse_args(argv)
    if args.record:
        record(args.record)
        return 0
    if args.fleet_only:
        return 0 if bench_fleet(args.rounds) else 1
    ok = balance(args.shards)
    ok &= merge_benches(args.stress, args.rounds)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
