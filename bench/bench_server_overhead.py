"""The harness's overhead per request of a server case, against the request itself (issue 19's
bar: at most 5 % of a tinyav request served at TP 1).

Both sides in one invocation, on the bundled server case (``cases/server/tinyav.toml``: TP 1,
INT8, one small text-to-video+audio request):

(a) direct: ``python -m tinyav.serve`` started by hand, ``--requests`` POSTs of that request
    with httpx, each timed from send to the parsed JSON answer (what any client pays); beside
    it the same server writing the perf log (``HARNESS_PERF_LOG``), sent the same requests
    interleaved, for the server-side share of the harness's cost;
(b) through the harness: the same case with 2 and with 2 + ``--requests`` requests, each run
    by ``harness run`` (real worker, the server started and stopped by the server case, its
    answers decoded, written and recorded as outputs, the perf log read). The difference of
    the two attempts' durations over the extra requests is the harness's time per request,
    with start-up and stop cancelled out.

(c) in this process, on the last answer of (a): the harness's own work on an answer beyond
    what any client does (the outputs decoded from base64, written, hashed and their NaN/Inf
    counted, as the server case's worker does it), CPU time per answer, with the NaN/Inf
    count as it is now (one pass, float frames only) and as it was (each file decoded whole to
    RGB and float PCM), interleaved A B B A.

Prints the direct median, the harness's marginal time per request and the overhead in %, in
wall time and in CPU time. On a machine shared with other work, wall time per request moves by
tens of ms between runs; CPU seconds do not (tinyav serves each request on one thread, so on a
quiet machine a request's wall time is its CPU time): (a)'s CPU is the server's (from
``/proc/<pid>/stat``) plus the client's, (b)'s that of the whole ``harness run`` process tree
(``RUSAGE_CHILDREN``: manager, worker, server), marginal over the extra requests.

    python bench/bench_server_overhead.py [--requests 10] [--no-harness-run]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CASE_FILE = REPO / "cases" / "server" / "tinyav.toml"


def the_request() -> dict[str, Any]:
    doc = tomllib.loads(CASE_FILE.read_text())
    request: dict[str, Any] = doc["case"][0]["requests"][0]["json"]
    return request


def _proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


ANSWER: list[str] = []  # the last answer's JSON text, for (c)


def _start_server(perf: Path | None) -> tuple[subprocess.Popen[bytes], str]:
    from harness.worker.server_case import free_port

    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO / "targets" / "tinyav"), str(REPO)]),
        "TINYAV_NUM_THREADS": "1",
    }
    env.pop("HARNESS_PERF_LOG", None)
    if perf is not None:
        env["HARNESS_PERF_LOG"] = str(perf)
    cmd = [sys.executable, "-m", "tinyav.serve", "--port", str(port), "--tp", "1"]
    server = subprocess.Popen(
        [*cmd, "--quant", "int8"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    return server, f"http://127.0.0.1:{port}"


def direct(n: int, perf: Path) -> tuple[list[float], float, float]:
    """``n`` timed requests to a server started by hand (after one untimed warm-up), the CPU
    seconds per request of that server and the client together, and the server's extra CPU
    seconds per request when it writes the perf log (a second server with
    ``HARNESS_PERF_LOG``, sent the same requests interleaved A B B A)."""
    import httpx

    sys.path.insert(0, str(REPO))
    servers = [_start_server(None), _start_server(perf)]
    try:
        with httpx.Client(trust_env=False, timeout=300) as client:
            body = the_request()
            for _, url in servers:
                deadline = time.monotonic() + 240
                while True:
                    try:
                        if client.get(f"{url}/health").status_code == 200:
                            break
                    except httpx.TransportError:
                        pass
                    if time.monotonic() > deadline:
                        raise SystemExit("tinyav.serve did not become ready within 240 s")
                    time.sleep(0.05)
                client.post(f"{url}/v1/videos/generations", json=body).raise_for_status()
            times: list[float] = []
            cpu = [0.0, 0.0]
            own = 0.0
            for i in range(n):
                for k in (0, 1, 1, 0):
                    server, url = servers[k]
                    c0, o0, t0 = _proc_cpu(server.pid), time.process_time(), time.perf_counter()
                    r = client.post(
                        f"{url}/v1/videos/generations", json={**body, "request_id": f"d{i}-{k}"}
                    )
                    r.raise_for_status()
                    r.json()
                    if k == 0:
                        times.append(time.perf_counter() - t0)
                        own += time.process_time() - o0
                        ANSWER[:] = [r.text]
                    cpu[k] += _proc_cpu(server.pid) - c0
            return times, (cpu[0] + own) / (2 * n), (cpu[1] - cpu[0]) / (2 * n)
    finally:
        for server, _ in servers:
            server.terminate()
            server.wait(timeout=60)


def through_harness(n: int, root: Path) -> tuple[float, float]:
    """The duration of one server-case attempt with ``n`` requests, through `harness run`, and
    the CPU seconds of the run's whole process tree."""
    text = CASE_FILE.read_text()
    block = text[text.index("[[case.requests]]") : text.index("# Judged against")]
    extra = "".join(
        block.replace("seed = 5", "seed = 5, request_id = " + json.dumps(f"h{n}-{i}"))
        for i in range(1, n)
    )
    # the extra requests' outputs need names of their own: r<i>. prefixes are the case's
    body = text.replace("# Judged against", extra + "# Judged against", 1)
    body = re.sub(r"\[\[case\.checks\]\][^\[]*", "", body)  # outputs judged by finiteness only
    body = body.replace('reference = "serve-tp1-int8"\n', "")
    folder = root / f"n{n}"
    folder.mkdir()
    (folder / "case.toml").write_text(body)
    cpu0 = _children_cpu()
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", str(folder / "case.toml"),
         "--out", str(folder / "runs"), "--run-id", "r", "-q"],
        cwd=REPO, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    cpu = _children_cpu() - cpu0
    if proc.returncode != 0:
        raise SystemExit(f"harness run of {n} requests exited {proc.returncode}:\n{proc.stderr}")
    doc = json.loads((folder / "runs" / "r" / "report.json").read_text())
    (attempt,) = doc["cases"][0]["attempts"]
    return float(attempt["duration_s"]), cpu


def answer_work(rounds: int) -> tuple[float, float]:
    """(c): median CPU seconds of the worker's work on one answer, now and decoded whole."""
    sys.path.insert(0, str(REPO))
    from harness import probe
    from harness.cases.load import load_file
    from harness.probe import content
    from harness.worker import server_case

    (case,) = load_file(CASE_FILE)
    (request,) = case.requests
    now_count = content._file_nonfinite

    def whole(path: Path) -> tuple[int | None, str | None]:  # before: decoded whole
        if path.suffix.lower() not in content._MEDIA_SUFFIXES:
            return now_count(path)
        try:
            return sum(content._nonfinite(x) for x in content._decode_media(path)), None
        except Exception as exc:
            return None, str(exc)

    times: dict[str, list[float]] = {"now": [], "whole": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(rounds):
            for label in ("now", "whole", "whole", "now"):
                content._file_nonfinite = now_count if label == "now" else whole
                probe.__dict__["_file_nonfinite"] = content._file_nonfinite
                probe._begin(
                    seed=1, platform="cpu", output_dir=Path(tmp) / f"{label}{i}{len(times[label])}"
                )
                try:
                    answer = json.loads(ANSWER[0])  # a plain client parses it too
                    t0 = time.process_time()
                    server_case._take_outputs(0, request, answer, "")
                    times[label].append(time.process_time() - t0)
                finally:
                    probe._end()
    content._file_nonfinite = now_count
    probe.__dict__["_file_nonfinite"] = now_count
    return statistics.median(times["now"]), statistics.median(times["whole"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=10)
    ap.add_argument("--no-harness-run", action="store_true", help="(a) and (c) only")
    args = ap.parse_args()
    n = args.requests
    with tempfile.TemporaryDirectory() as tmp:
        times, cpu_direct, cpu_perf = direct(n, Path(tmp) / "perf")
    med = statistics.median(times)
    print(f"direct: {2 * n} requests, median {med * 1000:.1f} ms (min {min(times) * 1000:.1f})")
    print(f"direct: {cpu_direct * 1000:.1f} ms CPU per request (server + client)")
    print(f"server's perf log (HARNESS_PERF_LOG set): {cpu_perf * 1000:+.1f} ms CPU per request")
    now, whole = answer_work(15)
    print(
        f"harness work on one answer (c), CPU: {now * 1000:.1f} ms now (one pass, float frames "
        f"only); {whole * 1000:.1f} ms decoding each file whole (before)"
    )
    for label, work in (("now", now), ("before", whole)):
        total = work + max(cpu_perf, 0.0)
        print(
            f"harness CPU per request, {label}: {total * 1000:.1f} ms (answer + perf log) = "
            f"{total / cpu_direct * 100:.1f} % of the request's {cpu_direct * 1000:.1f} ms"
        )
    if args.no_harness_run:
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        small, cpu_small = through_harness(2, Path(tmp))
        large, cpu_large = through_harness(2 + n, Path(tmp))
    per = (large - small) / n
    cpu_per = (cpu_large - cpu_small) / n
    print(f"harness: attempt with 2 requests {small:.2f} s, with {2 + n} {large:.2f} s")
    print(f"harness: {per * 1000:.1f} ms per request (marginal)")
    print(f"harness: {cpu_per * 1000:.1f} ms CPU per request (marginal, whole process tree)")
    print(
        f"overhead per request, wall: {(per - med) * 1000:+.1f} ms = {(per / med - 1) * 100:+.1f} %"
    )
    print(
        f"overhead per request, CPU: {(cpu_per - cpu_direct) * 1000:+.1f} ms = "
        f"{(cpu_per / cpu_direct - 1) * 100:+.1f} %"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
