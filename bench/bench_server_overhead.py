"""The harness's overhead per request of a server case, against the request itself (issue 19's
bar: at most 5 % of a tinyav request served at TP 1).

Both sides in one invocation, on the bundled server case (``cases/server/tinyav.toml``: TP 1,
INT8, one small text-to-video+audio request), each side's server writing the perf log
(``HARNESS_PERF_LOG``, as a server case's does), so that a request's *cycle* (from one request's
start in the server to the next one's, ``started_at`` of consecutive perf-log lines: the
server's work, the answer's trip, whatever the client does with it, the next request's trip)
is measured the same way on both sides, without start-up or stop:

(a) direct: ``python -m tinyav.serve`` started by hand, ``--requests`` POSTs in a plain httpx
    loop (post, parse the JSON, next), before and after (b); beside it the same server without
    the perf log, sent requests interleaved A B B A with the first, for the perf log's own cost
    (wall and the server's CPU) and for the request's time as a client sees it (the bar's
    denominator);
(b) through the harness: ``harness run`` of the case with 2 + ``--requests`` requests (real
    manager and worker, the server started and stopped by the server case, its answers taken,
    written, hashed and scanned as outputs, the perf log read back): the cycles of its requests
    from its server's perf log in the run's output folder, the worker's CPU per request (the
    attempt's ``stage_cpu`` of ``server.request``: the whole worker process, so the answers'
    recording on its own thread is counted), and the attempt's start-up, requests and stop;
(c) in this process, on the last answer of (a): the worker's work on one answer (fields
    decoded from base64, written, hashed, NaN/Inf counted: the MP4 opened and decoded), CPU.

Overhead per request, wall: (b)'s median gap (the cycle less the server's own request time) less
(a)'s, plus the perf log's cost (its CPU: it runs inside the request on the engine thread);
CPU: the worker's CPU per request less a plain client's, plus the perf log's CPU in the
server; each against the direct request (to a server without the perf log).

``--marginal`` adds the method used before 2026-12-02 afternoon:
one more attempt with 2 requests, the difference of the two attempts' durations over the extra
requests, with each attempt's start-up and stop printed (one sample each: their jitter divided
by ``--requests`` is in that figure).

    python bench/bench_server_overhead.py [--requests 10] [--marginal]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
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
ANSWER: list[str] = []  # the last answer's JSON text, for (c)


def the_request() -> dict[str, Any]:
    doc = tomllib.loads(CASE_FILE.read_text())
    request: dict[str, Any] = doc["case"][0]["requests"][0]["json"]
    return request


def _proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def perf_lines(folder: Path) -> list[dict[str, Any]]:
    lines = []
    for path in sorted(folder.glob("perf-rank0-*.jsonl")):
        lines += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return sorted(lines, key=lambda r: float(r["started_at"]))


def cycles(lines: list[dict[str, Any]], ids: set[str]) -> tuple[list[float], list[float]]:
    """For consecutive requests both in ``ids``: the seconds from each one's start in the server
    to the next one's (the cycle), and the part of it outside the server's request scope (the
    gap: the answer's encoding and trip, the client's work on it, the next request's trip and
    parsing), which leaves out the denoising's load-dependent seconds."""
    pairs = [
        (a, b)
        for a, b in itertools.pairwise(lines)
        if a["request_id"] in ids and b["request_id"] in ids
    ]
    cycle = [float(b["started_at"]) - float(a["started_at"]) for a, b in pairs]
    gap = [c - float(a["wall_s"]) for c, (a, _) in zip(cycle, pairs, strict=True)]
    return cycle, gap


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


class Direct:
    """(a): a server with the perf log (P) and one without (D), started by hand."""

    def __init__(self, perf: Path) -> None:
        import httpx

        sys.path.insert(0, str(REPO))
        self.perf = perf
        self.servers = [_start_server(None), _start_server(perf)]
        self.client = httpx.Client(trust_env=False, timeout=300)
        self.body = the_request()
        self.n = 0
        for _, url in self.servers:
            deadline = time.monotonic() + 240
            while True:
                try:
                    if self.client.get(f"{url}/health").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise SystemExit("tinyav.serve did not become ready within 240 s")
                time.sleep(0.05)
            self.post(url, "warm")

    def post(self, url: str, rid: str) -> Any:
        r = self.client.post(f"{url}/v1/videos/generations", json={**self.body, "request_id": rid})
        r.raise_for_status()
        return r

    def cycle_block(self, n: int) -> set[str]:
        """``n`` requests to P in a plain loop; their ids."""
        url = self.servers[1][1]
        ids = {f"c{self.n}-{i}" for i in range(n)}
        for i in range(n):
            self.post(url, f"c{self.n}-{i}").json()
        self.n += 1
        return ids

    def interleaved(self, n: int) -> dict[str, Any]:
        """``n`` rounds of D P P D: each side's wall per request (send to parsed JSON), server
        CPU per request, and the client's CPU per request."""
        wall: list[list[float]] = [[], []]
        cpu = [0.0, 0.0]
        own = 0.0
        for i in range(n):
            for k in (0, 1, 1, 0):
                server, url = self.servers[k]
                c0, o0, t0 = _proc_cpu(server.pid), time.process_time(), time.perf_counter()
                r = self.post(url, f"i{i}-{k}-{len(wall[k])}")
                r.json()
                wall[k].append(time.perf_counter() - t0)
                own += time.process_time() - o0
                cpu[k] += _proc_cpu(server.pid) - c0
                if k == 0:
                    ANSWER[:] = [r.text]
        return {
            "wall": [statistics.median(w) for w in wall],
            "server_cpu": [c / (2 * n) for c in cpu],
            "client_cpu": own / (4 * n),
        }

    def close(self) -> None:
        self.client.close()
        for server, _ in self.servers:
            server.terminate()
            server.wait(timeout=60)


def case_with(n: int, folder: Path) -> Path:
    """The bundled case with ``n`` requests (the checks by finiteness only: the extra
    requests' outputs have no reference)."""
    text = CASE_FILE.read_text()
    block = text[text.index("[[case.requests]]") : text.index("# Judged against")]
    extra = "".join(
        block.replace("seed = 5", "seed = 5, request_id = " + json.dumps(f"h{n}-{i}"))
        for i in range(1, n)
    )
    body = text.replace("# Judged against", extra + "# Judged against", 1)
    body = re.sub(r"\[\[case\.checks\]\][^\[]*", "", body)
    body = body.replace('reference = "serve-tp1-int8"\n', "")
    folder.mkdir(parents=True)
    (folder / "case.toml").write_text(body)
    return folder / "case.toml"


def through_harness(n: int, root: Path) -> dict[str, Any]:
    """One ``harness run`` of the case with ``n`` requests: the attempt and its server's
    perf-log lines."""
    folder = root / f"n{n}"
    case = case_with(n, folder)
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", str(case),
         "--out", str(folder / "runs"), "--run-id", "r", "-q"],
        cwd=REPO, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"harness run of {n} requests exited {proc.returncode}:\n{proc.stderr}")
    doc = json.loads((folder / "runs" / "r" / "report.json").read_text())
    (attempt,) = doc["cases"][0]["attempts"]
    (perf,) = (folder / "runs" / "r" / "outputs").glob("*/a0/server/perf")
    attempt["perf_lines"] = perf_lines(perf)
    return dict(attempt)


def answer_work(rounds: int) -> dict[str, float]:
    """(c): median CPU seconds of the worker's work on one answer (as the server case does
    it), and of the MP4's NaN/Inf scan within it."""
    from harness import probe
    from harness.cases.load import load_file
    from harness.probe.mediascan import media_nonfinite

    try:
        from harness.worker.server_answers import _take_outputs
    except ImportError:  # a checkout from before 2026-12-02 afternoon (--marginal's "before")
        from harness.worker.server_case import _take_outputs  # type: ignore[attr-defined,no-redef]

    (case,) = load_file(CASE_FILE)
    (request,) = case.requests
    whole: list[float] = []
    scan: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(rounds):
            probe._begin(seed=1, platform="cpu", output_dir=Path(tmp) / f"a{i}")
            try:
                answer = json.loads(ANSWER[0])  # a plain client parses it too
                t0 = time.process_time()
                _take_outputs(0, request, answer, "")
                whole.append(time.process_time() - t0)
                mp4 = Path(tmp) / f"a{i}" / "video.mp4"
                t0 = time.process_time()
                media_nonfinite(mp4)
                scan.append(time.process_time() - t0)
            finally:
                probe._end()
    return {"answer": statistics.median(whole), "scan": statistics.median(scan)}


def ms(x: float) -> str:
    return f"{x * 1000:.1f} ms"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=10)
    ap.add_argument("--marginal", action="store_true", help="also the 2-vs-N attempts method")
    args = ap.parse_args()
    n = args.requests
    with tempfile.TemporaryDirectory() as tmp:
        direct = Direct(Path(tmp) / "perf")
        try:
            ids = direct.cycle_block(n + 1)
            with tempfile.TemporaryDirectory() as htmp:
                big = through_harness(2 + n, Path(htmp))
                small = through_harness(2, Path(htmp)) if args.marginal else None
            ids |= direct.cycle_block(n + 1)
            inter = direct.interleaved(n)
        finally:
            direct.close()
        direct_cycles, direct_gaps = cycles(perf_lines(direct.perf), ids)
    lines = big["perf_lines"]
    harness_cycles, harness_gaps = cycles(lines, {str(line["request_id"]) for line in lines})
    request = inter["wall"][0]  # the bar's denominator: a request to a server without the log
    d_cycle, h_cycle = statistics.median(direct_cycles), statistics.median(harness_cycles)
    d_gap, h_gap = statistics.median(direct_gaps), statistics.median(harness_gaps)
    perf_wall = inter["wall"][1] - inter["wall"][0]
    perf_cpu = inter["server_cpu"][1] - inter["server_cpu"][0]
    direct_cpu = inter["server_cpu"][0] + inter["client_cpu"]
    stages, stage_cpu = big["stages"], big["stage_cpu"]
    work = answer_work(15)
    # The last answer's outputs are recorded after the last request's stage closed: (c) stands
    # in for that one.
    worker_cpu = (stage_cpu["server.request"] + work["answer"]) / (2 + n)
    print(f"direct request (send to parsed JSON, median of {2 * n}): {ms(request)}")
    print(f"direct request CPU (server + client): {ms(direct_cpu)}")
    print(f"perf log (HARNESS_PERF_LOG), interleaved: {ms(perf_wall)} wall, {ms(perf_cpu)} CPU")
    print(
        f"cycle, direct (median of {len(direct_cycles)}): {ms(d_cycle)}, of which outside the "
        f"server's request scope: {ms(d_gap)}"
    )
    print(
        f"cycle, through harness run (median of {len(harness_cycles)}): {ms(h_cycle)}, of "
        f"which outside the server's request scope: {ms(h_gap)}"
    )
    print(
        f"attempt of {2 + n} requests: {big['duration_s']:.2f} s = start-up "
        f"{stages['server.startup']:.2f} s + requests {stages['server.request']:.2f} s + stop "
        f"{stages.get('server.stop', float('nan')):.2f} s + rest"
    )
    print(
        f"worker CPU per request (client and answer): {ms(worker_cpu)}; a plain client's: "
        f"{ms(inter['client_cpu'])}"
    )
    print(
        f"of which (c), one answer's outputs taken, written, hashed, scanned: "
        f"{ms(work['answer'])} CPU (the MP4's NaN/Inf and decode scan {ms(work['scan'])}), "
        "on the worker's output thread, overlapping the next request"
    )
    # Wall: what the harness adds between its server's requests (the gap's difference: the
    # cycles' own difference is the same plus the denoising's load noise, printed beside it),
    # plus the perf log's cost inside each request, taken at its CPU (its work runs on the
    # engine thread, in the request: on a quiet machine its wall time; the interleaved wall
    # difference is printed above, within the load's noise).
    wall = h_gap - d_gap + max(perf_cpu, 0.0)
    print(
        f"overhead per request, wall: {ms(h_gap - d_gap)} between requests + "
        f"{ms(max(perf_cpu, 0))} perf log = {ms(wall)} = {wall / request * 100:+.1f} % of "
        f"{ms(request)} (cycles' difference: {ms(h_cycle - d_cycle)})"
    )
    cpu = worker_cpu - inter["client_cpu"] + max(perf_cpu, 0.0)
    print(
        f"overhead per request, CPU: {ms(worker_cpu - inter['client_cpu'])} worker + "
        f"{ms(max(perf_cpu, 0))} perf log = {ms(cpu)} = {cpu / direct_cpu * 100:+.1f} % of "
        f"{ms(direct_cpu)}"
    )
    if small is not None:
        per = (big["duration_s"] - small["duration_s"]) / n
        for label, a in (("2", small), (str(2 + n), big)):
            s = a["stages"]
            print(
                f"marginal method: attempt of {label}: {a['duration_s']:.2f} s (start-up "
                f"{s['server.startup']:.2f} s, requests {s['server.request']:.2f} s, stop "
                f"{s.get('server.stop', float('nan')):.2f} s)"
            )
        print(f"marginal method: {ms(per)} per request = {(per / request - 1) * 100:+.1f} %")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
