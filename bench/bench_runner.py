"""Batched runner versus one pytest process per attempt, on the same machine, in one invocation.

Nine cases x seven repeats of a cheap case that imports torch:

(a) ``harness run`` on the nine cases (repeats = 7): one worker imports torch once and runs all
    63 attempts back to back;
(b) one ``python -m pytest`` process per attempt (63 interpreter start-ups, each importing
    torch), which is what the motivating CI did.

Prints both wall times, the ratio, and the harness's overhead per attempt beyond the case's own
work and the one worker start. Usage::

    python bench/bench_runner.py            # full: 9 x 7
    python bench/bench_runner.py --quick    # 3 x 3, a smoke run
    python bench/bench_runner.py --overhead-only   # the in-process run only (A/B runs)
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

CASE_MODULE = """
def cheap(i=0):
    import torch
    x = torch.arange(64, dtype=torch.float32) * (i + 1)
    assert float(x.sum()) == 2016.0 * (i + 1)
"""

TEST_MODULE = """
import pytest
from benchcase import cheap

@pytest.mark.parametrize("i", range({n}))
def test_cheap(i):
    cheap(i)
"""


def write_project(root: Path, n_cases: int, repeats: int) -> None:
    (root / "code").mkdir()
    (root / "code" / "benchcase.py").write_text(CASE_MODULE)
    (root / "cases").mkdir()
    body = "".join(
        textwrap.dedent(f"""
        [[case]]
        id = "cheap-{i}"
        kind = "pipeline"
        target = "benchcase:cheap"
        params = {{ i = {i} }}
        repeats = {repeats}
        """)
        for i in range(n_cases)
    )
    (root / "cases" / "bench.toml").write_text(body)
    (root / "test_bench.py").write_text(TEST_MODULE.format(n=n_cases))


def run_harness_cli(root: Path) -> float:
    t0 = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.cli",
            "run",
            "cases",
            "--code-root",
            "code",
            "-q",
            "--run-id",
            "cli",
            "--out",
            "reports",
        ],
        cwd=root,
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - t0


def _process_cpu(pid: int) -> float | None:
    """CPU seconds (user + system) a live process has used so far; None off Linux."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class ManagerGap:
    """The manager's CPU between reading a worker's answer and having encoded the next
    attempt's request: the worker waits through it (the serial part of the manager's work,
    read as thread CPU, so that other load on the machine does not count)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.gaps = 0
        self._read: float | None = None

    def install(self) -> None:
        from harness.execution import pool
        from harness.worker import protocol

        read_line, encode = pool.WorkerHandle._read_line, protocol.encode

        def timed_read(handle: Any, *args: Any) -> bytes:
            line = read_line(handle, *args)
            self._read = time.thread_time()
            return line

        def timed_encode(msg: Any, **kw: Any) -> str:
            text = encode(msg, **kw)
            if isinstance(msg, protocol.AttemptRequest) and self._read is not None:
                self.seconds += time.thread_time() - self._read
                self.gaps += 1
                self._read = None
            return text

        pool.WorkerHandle._read_line = timed_read  # type: ignore[method-assign,assignment]
        send = getattr(pool.WorkerHandle, "send", None)
        if send is None:  # before the pipeline: the request's text is made, then written
            protocol.encode = timed_encode
            return

        def timed_send(handle: Any, msg: Any, **kw: Any) -> None:
            send(handle, msg, **kw)  # (its write included, which the other way leaves out)
            if isinstance(msg, protocol.AttemptRequest) and self._read is not None:
                self.seconds += time.thread_time() - self._read
                self.gaps += 1
                self._read = None

        pool.WorkerHandle.send = timed_send  # type: ignore[method-assign,assignment]

    @property
    def per_gap(self) -> float:
        return self.seconds / self.gaps if self.gaps else 0.0


def harness_overhead(
    root: Path, gap: ManagerGap | None = None
) -> tuple[float, float, float, int, tuple[float, float] | None, int]:
    """In-process run: wall, one worker start, per-attempt overhead (s), attempts, the CPU
    seconds per attempt of the manager and of the worker after the first case (None off
    Linux), and how many attempts were sent to the worker ahead of their turn: on a loaded
    machine wall time measures the queue for the CPUs more than the harness, CPU time does
    not; with the next attempt sent ahead the two sides work at once, so the wall time per
    attempt tends to the larger of the two."""
    from harness.cases import load_suite
    from harness.cases.plan import build_plan
    from harness.execution.run import Runner, RunOptions

    suite = load_suite([root / "cases"])
    runner = Runner(
        RunOptions(
            out_root=root / "reports",
            run_id="inproc",
            code_roots=(str(root / "code"),),
            cwd=str(root),
        )
    )
    items = build_plan(suite.cases, ["cpu"])
    if gap is not None:
        gap.install()
    t0 = time.perf_counter()
    # The first case starts the worker and probes its environment (the fixed cost); the CPU
    # figure is read over the others.
    runner.run_plan(items[:1])
    workers = list(runner.pool._workers.values())
    cpu0 = [_process_cpu(w.pid) for w in workers]
    c0 = time.process_time()
    runner.run_plan(items[1:])
    manager_cpu = time.process_time() - c0
    cpu1 = [_process_cpu(w.pid) for w in workers]
    report = runner.finish()
    wall = time.perf_counter() - t0
    attempts = [a for c in report.cases for a in c.attempts]
    assert all(a.status == "passed" for a in attempts), [a.error for a in attempts]
    work = sum(a.duration_s for a in attempts)
    # One worker start and one environment probe per run are the fixed cost; the rest of the
    # wall time beyond the cases' own work is the per-attempt overhead.
    startup = runner.pool.start_seconds + runner.executor.env_seconds
    later = sum(len(c.attempts) for c in report.cases[1:])
    cpu = None
    if workers and None not in cpu0 and None not in cpu1 and later:
        worker_cpu = sum(float(b or 0.0) - float(a or 0.0) for a, b in zip(cpu0, cpu1, strict=True))
        cpu = (manager_cpu / later, worker_cpu / later)
    ahead = getattr(runner.executor, "sent_ahead", 0)  # 0 before the pipeline existed
    return wall, startup, (wall - startup - work) / len(attempts), len(attempts), cpu, ahead


def run_pytest_per_attempt(root: Path, n_cases: int, repeats: int) -> tuple[float, list[float]]:
    each = []
    t0 = time.perf_counter()
    for _ in range(repeats):
        for i in range(n_cases):
            s = time.perf_counter()
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pytest",
                    "-q",
                    "-p",
                    "no:cacheprovider",
                    f"test_bench.py::test_cheap[{i}]",
                ],
                cwd=root,
                check=True,
                capture_output=True,
                env={**os.environ, "PYTHONPATH": str(root / "code")},
            )
            each.append(time.perf_counter() - s)
    return time.perf_counter() - t0, each


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="3 cases x 3 repeats")
    parser.add_argument(
        "--overhead-only",
        action="store_true",
        help="only the in-process run (the per-attempt overhead and CPU), for A/B runs",
    )
    args = parser.parse_args()
    n_cases, repeats = (3, 3) if args.quick else (9, 7)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_project(root, n_cases, repeats)
        n = n_cases * repeats
        print(f"{n_cases} cases x {repeats} repeats = {n} attempts of a case that imports torch")
        wall_a = 0.0
        if not args.overhead_only:
            wall_a = run_harness_cli(root)
            print(f"(a) harness run (CLI, end to end):           {wall_a:8.2f} s")
        gap = ManagerGap()
        wall_in, startup, overhead, n_att, cpu, ahead = harness_overhead(root, gap)
        print(
            f"    in-process runner: {wall_in:.2f} s wall, worker start {startup:.2f} s, "
            f"overhead {overhead * 1000:.2f} ms/attempt over {n_att} attempts "
            f"({ahead} sent to the worker ahead of their turn)"
        )
        if cpu is not None:
            print(
                f"    CPU per attempt after the first case (the case's own work included): "
                f"{sum(cpu) * 1000:.2f} ms (manager {cpu[0] * 1000:.2f}, worker "
                f"{cpu[1] * 1000:.2f}); 1-min load {os.getloadavg()[0]:.2f}"
            )
        print(
            f"    manager CPU between an answer and the next attempt's request (the worker "
            f"waits through it): {gap.per_gap * 1000:.2f} ms over {gap.gaps} gaps"
        )
        if args.overhead_only:
            print("per-attempt target (<= 2 ms):", "met" if overhead <= 0.002 else "NOT met")
            return
        wall_b, each = run_pytest_per_attempt(root, n_cases, repeats)
        print(
            f"(b) one python -m pytest per attempt:       {wall_b:8.2f} s "
            f"(median {statistics.median(each):.2f} s per process)"
        )
        print(f"ratio (b)/(a): {wall_b / wall_a:.1f}x")
        ok = overhead <= 0.002 and wall_b / wall_a >= 20
        print("target (<= 2 ms/attempt overhead and >= 20x):", "met" if ok else "NOT met")


if __name__ == "__main__":
    main()
