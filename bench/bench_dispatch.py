"""What ``harness dispatch --ray`` adds to Ray's own job start (issue 22: < 2 s per shard).

A one-node Ray cluster is started here (``ray start --head --num-cpus=4``, in a session of
its own, stopped by its process group) and is up once a first job ran. A tiny suite (8
loader cases calling a no-op) is dispatched in 4 shards, once to warm the cluster, then
``--rounds`` times, each ``harness dispatch`` in a fresh process as a user runs it. Each
round's time line is cut by Ray's own record of its jobs (``JobDetails.start_time`` and
``end_time``):

- before Ray: the process's start-up, loading and splitting the plan, and the submit calls
  up to Ray's start of the first job;
- in Ray: the first job's start to the last job's end (Ray's job start, the shard runs);
- after Ray: noticing the last end (0.5 s poll), the merge and writing the merged folder.

Per shard, the harness adds its submit call (printed by dispatch itself) and at most a poll
interval before it notices the end; the rest is paid once per dispatch and is printed
beside it. Needs ``ray[default]``, which the dev extra leaves out (its install ~70 s and
376 MB, ``ray start`` ~30 s).

Usage::

    python bench/bench_dispatch.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SHARDS = 4
CASES = "".join(f'[[case]]\nid = "c{i}"\nkind = "loader"\ntarget = "tmod:ok"\n\n' for i in range(8))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def ray_cluster() -> Iterator[str]:
    from ray.job_submission import JobSubmissionClient

    ray = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")
    if ray is None:
        raise SystemExit("bench_dispatch: no `ray` command next to this Python")
    temp = tempfile.mkdtemp(prefix="hrb", dir="/tmp")  # short: Ray's socket paths
    dashboard = _free_port()
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [
            ray, "start", "--head", "--block", "--node-ip-address=127.0.0.1",
            f"--port={_free_port()}", "--dashboard-host=127.0.0.1",
            f"--dashboard-port={dashboard}", "--num-cpus=4", "--disable-usage-stats",
            f"--temp-dir={temp}",
        ],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    address = f"http://127.0.0.1:{dashboard}"
    try:
        while True:  # up when a job runs: the dashboard answers before the job agent does
            try:
                client = JobSubmissionClient(address)
                job = client.submit_job(entrypoint="true")
                status = ""
                while not status.endswith(("SUCCEEDED", "FAILED", "STOPPED")):
                    time.sleep(0.2)
                    status = str(client.get_job_status(job))
                if status.endswith("SUCCEEDED"):
                    break
                raise RuntimeError(f"the first job {job}: {status}")
            except Exception:
                if proc.poll() is not None or time.perf_counter() - t0 > 300:
                    raise
                time.sleep(1)
        print(f"ray start --head: a first job ran after {time.perf_counter() - t0:.1f} s")
        yield address
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        time.sleep(1)
        with contextlib.suppress(ProcessLookupError):  # what the group left behind
            os.killpg(proc.pid, signal.SIGKILL)
        shutil.rmtree(temp, ignore_errors=True)


def dispatch(address: str, work: Path, out: Path) -> tuple[float, float, str, str]:
    """Run ``harness dispatch``; its start and end (epoch seconds), its plan nonce and its
    line on the submit calls."""
    began = time.time()
    proc = subprocess.run(
        [
            sys.executable, "-m", "harness.cli", "dispatch", "--ray", address,
            "--shards", str(SHARDS), "--code-root", "code", "--out", str(out),
            "--python", sys.executable,
        ],
        cwd=work, capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    ended = time.time()
    if proc.returncode != 0:
        raise SystemExit(f"harness dispatch exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    nonce = re.search(r"nonce (\S+):", proc.stderr)
    line = re.search(r"dispatch: .*\(Ray's job API\)", proc.stderr)
    assert nonce is not None, proc.stderr
    return began, ended, nonce.group(1), line.group(0) if line else "(no submit line)"


def timeline(client: Any, nonce: str, began: float, ended: float) -> tuple[float, float, float]:
    """Before, in and after Ray (seconds) for the dispatch of ``nonce`` that ran from
    ``began`` to ``ended`` (epoch seconds), from Ray's record of its jobs."""
    jobs = [
        j
        for j in client.list_jobs()
        if j.submission_id and j.submission_id.startswith(f"harness-{nonce}-")
    ]
    assert len(jobs) == SHARDS, [j.submission_id for j in jobs]
    first = min(j.start_time for j in jobs) / 1000
    last = max(j.end_time for j in jobs) / 1000
    return first - began, last - first, ended - last


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    try:
        from ray.job_submission import JobSubmissionClient
    except ImportError:
        print("bench_dispatch: needs ray: pip install 'ray[default]' (not in the dev extra)")
        return 2
    with tempfile.TemporaryDirectory(prefix="bench-dispatch-") as tmp:
        work = Path(tmp)
        (work / "code").mkdir()
        (work / "code" / "tmod.py").write_text("def ok():\n    pass\n")
        (work / "cases").mkdir()
        (work / "cases" / "loader.toml").write_text(CASES)
        (work / "runners").mkdir()
        (work / "runners" / "cpu.toml").write_text(
            'name = "cpu"\nplatform = "cpu"\npreimport = []\n'
        )
        with ray_cluster() as address:
            client = JobSubmissionClient(address)
            began, ended, _, _ = dispatch(address, work, work / "warm")
            print(f"warm-up dispatch (fresh cluster): {ended - began:.1f} s")
            parts: dict[str, list[float]] = {"before": [], "in": [], "after": [], "all": []}
            for r in range(args.rounds):
                began, ended, nonce, line = dispatch(address, work, work / f"d{r}")
                before, within, after = timeline(client, nonce, began, ended)
                for k, v in zip(parts, (before, within, after, ended - began), strict=True):
                    parts[k].append(v)
                print(
                    f"round {r + 1}: {ended - began:.2f} s: before Ray {before:.2f} s, in Ray "
                    f"{within:.2f} s, after Ray {after:.2f} s; {line}"
                )
    med = {k: statistics.median(v) for k, v in parts.items()}
    print(
        f"dispatch of {SHARDS} shards (8 no-op loader cases), median of {args.rounds}: "
        f"{med['all']:.2f} s; before Ray (start-up, plan, submits) {med['before']:.2f} s, in "
        f"Ray {med['in']:.2f} s, after Ray (notice, merge, write) {med['after']:.2f} s; "
        f"the harness's share {med['before'] + med['after']:.2f} s, "
        f"{(med['before'] + med['after']) / SHARDS:.2f} s per shard"
    )
    ok = (med["before"] + med["after"]) / SHARDS < 2.0
    print(
        "dispatch target (< 2 s per shard beyond Ray's own job start: the harness's share "
        f"over the shards): {'met' if ok else 'MISSED'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
