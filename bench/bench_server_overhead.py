"""The harness's overhead per request of a server case, against the request itself (issue 19's
bar: at most 5 % of a tinyav request served at TP 1).

Both sides in one invocation, on the bundled server case (``cases/server/tinyav.toml``: TP 1,
INT8, one small text-to-video+audio request):

(a) direct: ``python -m tinyav.serve`` started by hand, ``--requests`` POSTs of that request
    with httpx, each timed from send to the parsed JSON answer (what any client pays);
(b) through the harness: the same case with 2 and with 2 + ``--requests`` requests, each run
    by ``harness run`` (real worker, the server started and stopped by the server case, its
    answers decoded, written and recorded as outputs, the perf log read). The difference of
    the two attempts' durations over the extra requests is the harness's time per request,
    with start-up and stop cancelled out.

Prints the direct median, the harness's marginal time per request and the overhead in %.

    python bench/bench_server_overhead.py [--requests 10]
"""

from __future__ import annotations

import argparse
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


def the_request() -> dict[str, Any]:
    doc = tomllib.loads(CASE_FILE.read_text())
    request: dict[str, Any] = doc["case"][0]["requests"][0]["json"]
    return request


def direct(n: int) -> list[float]:
    """``n`` timed requests to a server started by hand (after one untimed warm-up)."""
    import httpx

    sys.path.insert(0, str(REPO))
    from harness.worker.server_case import free_port

    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO / "targets" / "tinyav"), str(REPO)]),
        "TINYAV_NUM_THREADS": "1",
    }
    env.pop("HARNESS_PERF_LOG", None)
    cmd = [sys.executable, "-m", "tinyav.serve", "--port", str(port), "--tp", "1"]
    server = subprocess.Popen(
        [*cmd, "--quant", "int8"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(trust_env=False, timeout=300) as client:
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
            body = the_request()
            client.post(f"{url}/v1/videos/generations", json=body).raise_for_status()
            times = []
            for i in range(n):
                t0 = time.perf_counter()
                r = client.post(
                    f"{url}/v1/videos/generations", json={**body, "request_id": f"d{i}"}
                )
                r.raise_for_status()
                r.json()
                times.append(time.perf_counter() - t0)
            return times
    finally:
        server.terminate()
        server.wait(timeout=60)


def through_harness(n: int, root: Path) -> float:
    """The duration of one server-case attempt with ``n`` requests, through `harness run`."""
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
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", str(folder / "case.toml"),
         "--out", str(folder / "runs"), "--run-id", "r", "-q"],
        cwd=REPO, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"harness run of {n} requests exited {proc.returncode}:\n{proc.stderr}")
    doc = json.loads((folder / "runs" / "r" / "report.json").read_text())
    (attempt,) = doc["cases"][0]["attempts"]
    return float(attempt["duration_s"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=10)
    args = ap.parse_args()
    n = args.requests
    times = direct(n)
    med = statistics.median(times)
    print(f"direct: {n} requests, median {med * 1000:.1f} ms (min {min(times) * 1000:.1f})")
    with tempfile.TemporaryDirectory() as tmp:
        small = through_harness(2, Path(tmp))
        large = through_harness(2 + n, Path(tmp))
    per = (large - small) / n
    print(f"harness: attempt with 2 requests {small:.2f} s, with {2 + n} {large:.2f} s")
    print(f"harness: {per * 1000:.1f} ms per request (marginal)")
    print(f"overhead per request: {(per - med) * 1000:+.1f} ms = {(per / med - 1) * 100:+.1f} %")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
