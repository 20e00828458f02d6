"""Worker starts, spawned versus forked from the zygote, on the same machine, in one invocation.

A run starts its persistent worker again after a crash, a hang, a leftover process, for a case
with a code root of its own and once per side; each plain start imports torch. This starts and
kills the default persistent worker ``--starts`` times through the product's own
:class:`harness.execution.pool.WorkerPool`, with ``HARNESS_FORK_WORKERS=0`` (every worker
spawned) and ``=1`` (the first start includes the zygote's), alternating ``--rounds`` times, and
prints the wall time and the CPU of every process involved per start, and their ratios. Usage::

    python bench/bench_worker_start.py              # 8 starts, 3 rounds
    python bench/bench_worker_start.py --starts 3 --rounds 1   # a smoke run
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import tempfile
import time
from pathlib import Path

from harness.execution import zygote
from harness.execution.pool import WorkerPool, WorkerSpec


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def one(mode: str, starts: int, root: Path) -> tuple[float, float]:
    """Wall and CPU seconds per start, with ``HARNESS_FORK_WORKERS=mode``."""
    os.environ[zygote.ENV_SWITCH] = mode
    spec = WorkerSpec("cpu")
    pool = WorkerPool(root / f"workers-{mode}-{time.monotonic_ns()}")
    cpu0, t0 = _children_cpu(), time.perf_counter()
    try:
        for _ in range(starts):
            pool.get(spec)
            pool.discard(spec)
    finally:
        pool.close()
        zygote.close_all()  # reaps the zygote, whose CPU then counts among the children's
    return (time.perf_counter() - t0) / starts, (_children_cpu() - cpu0) / starts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--starts", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    res: dict[str, list[tuple[float, float]]] = {"0": [], "1": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for mode in ("0", "1") if r % 2 == 0 else ("1", "0"):
                wall, cpu = one(mode, args.starts, Path(tmp))
                res[mode].append((wall, cpu))
                name = "spawned" if mode == "0" else "forked "
                print(f"round {r + 1} {name}: {wall:.3f} s wall, {cpu:.3f} s CPU per start")
    load = os.getloadavg()[0]
    sw, sc = (statistics.median(x[i] for x in res["0"]) for i in (0, 1))
    fw, fc = (statistics.median(x[i] for x in res["1"]) for i in (0, 1))
    print(f"\n{args.starts} starts per run, medians of {args.rounds} runs (1-min load {load:.1f}):")
    print(f"  spawned: {sw:.3f} s wall, {sc:.3f} s CPU per start")
    print(f"  forked:  {fw:.3f} s wall, {fc:.3f} s CPU per start (the zygote's start included)")
    print(f"  ratio spawned/forked: {sw / fw:.1f}x wall, {sc / fc:.1f}x CPU")


if __name__ == "__main__":
    main()
