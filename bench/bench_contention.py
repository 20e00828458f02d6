"""What the stage clocks cost, and what wall time less run-queue delay reads under contention.

Three parts, in one process (Linux; ``/proc/self/task/<tid>/schedstat``):

(a) the cost of one ``probe.stage`` inside an attempt (enter + exit around nothing), and of
    the part of it that reads CPU time and run-queue delay;
(b) a pure-Python loop, alone and beside ``--hogs`` busy processes (``while 1: pass``): wall
    seconds, run-queue delay, wall less delay, CPU seconds;
(c) the same for a torch matmul loop on its intra-op pool (when torch is installed), where
    the delay of the largest single thread (what is recorded) is shown beside the sum over
    threads and the calling thread's alone, so the combining rule can be judged: wall less
    the recorded delay should stay at or above the uncontended wall time.

Usage::

    python bench/bench_contention.py              # 5 runs each, 2 hogs
    python bench/bench_contention.py --runs 3 --hogs 1
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from harness import probe
from harness.probe.clocks import perf_counter, process_time
from harness.probe.sched import CLOCKS


@contextmanager
def hogs(n: int) -> Iterator[None]:
    procs = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(n)]
    try:
        time.sleep(0.3)
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def stage_cost(n: int = 20000) -> tuple[float, float]:
    """CPU microseconds per stage (enter + exit), and of that the clock reads alone (CPU
    time, not wall time: on a loaded machine wall time would count other processes' turns)."""
    probe._begin(0, "cpu", None)
    try:
        for _ in range(500):
            with probe.stage("warm"):
                pass
        t = time.thread_time()
        for _ in range(n):
            with probe.stage("s"):
                pass
        per_stage = (time.thread_time() - t) / n * 1e6
    finally:
        probe._end()
    t = time.thread_time()
    for _ in range(n):
        before = CLOCKS.sample()
        c0 = process_time()
        w0 = perf_counter()
        wall = perf_counter() - w0
        cpu = process_time() - c0
        CLOCKS.finish(before, cpu, wall)
    reads = (time.thread_time() - t) / n * 1e6
    return per_stage, reads


def measure(work: Callable[[], None]) -> dict[str, float]:
    """One run of ``work`` as a stage, plus the thread-combining alternatives."""
    rec = probe._begin(0, "cpu", None)
    before = CLOCKS.sample(relist=True)
    me = threading.get_native_id()
    try:
        with probe.stage("work"):
            work()
    finally:
        probe._end()
    after = CLOCKS.sample(relist=True)
    wall, wait = rec.stages["work"], rec.stage_wait.get("work", 0.0)
    delays = {t: (w - before.get(t, (0, 0))[1]) / 1e9 for t, (_, w) in after.items()}
    return {
        "wall": wall,
        "wait": wait,
        "judged": wall - wait,
        "cpu": rec.stage_cpu["work"],
        # One thread: wall less delay should equal its CPU time (paired, per run).
        "judged-cpu": wall - wait - rec.stage_cpu["work"],
        "sum_judged": wall - min(sum(delays.values()), wall),
        "caller_judged": wall - min(delays.get(me, 0.0), wall),
    }


def python_loop() -> None:
    x = 0
    for i in range(6_000_000):
        x += i


def torch_work() -> Callable[[], None]:
    import torch

    a = torch.randn(384, 384)

    def work() -> None:
        for _ in range(200):
            a @ a

    return work


def table(name: str, work: Callable[[], None], runs: int, n_hogs: int, extra: bool) -> None:
    for label, load in (("alone", 0), (f"beside {n_hogs} hogs", n_hogs)):
        with hogs(load):
            rows = [measure(work) for _ in range(runs)]
        keys = ["wall", "wait", "judged", "cpu"]
        keys += ["sum_judged", "caller_judged"] if extra else ["judged-cpu"]
        cells = []
        for k in keys:
            vals = sorted(r[k] for r in rows)
            cells.append(f"{k} {statistics.median(vals):.4f} [{vals[0]:.4f} {vals[-1]:.4f}]")
        print(f"{name:14s} {label:16s} " + "  ".join(cells))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--hogs", type=int, default=2)
    args = ap.parse_args()
    if not CLOCKS.available:
        print("no /proc/self/task here: run-queue delay is not recorded on this system")
        return 1
    per_stage, reads = stage_cost()
    threads = len(CLOCKS.sample(relist=True))
    print(
        f"stage cost: {per_stage:.1f} us per stage (enter+exit), of which CPU-time and "
        f"run-queue reads {reads:.1f} us ({threads} threads)"
    )
    print("seconds, median [min-max]; judged = wall less run-queue delay (recorded rule)")
    table("python loop", python_loop, args.runs, args.hogs, extra=False)
    try:
        work = torch_work()
    except ImportError:
        print("torch not installed: intra-op part skipped")
        return 0
    work()
    print(f"torch threads: {len(CLOCKS.sample(relist=True))} (intra-op pool included)")
    table("torch matmul", work, args.runs, args.hogs, extra=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
