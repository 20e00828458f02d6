"""How soon a server case sees its server become ready (the issue's bar: within 100 ms).

Starts a tiny HTTP server whose ``/health`` answers 503 until a moment it is given, then 200,
and times :meth:`harness.worker.server_case.Server.wait_ready` (the poll a server case runs:
10 ms doubling to a cap) from that moment to its return, over several rounds at different
offsets. Prints each delay, the median and the worst.

    python bench/bench_readiness.py [--rounds 20]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness.model.server import ServerSpec  # noqa: E402
from harness.worker.server_case import Server, free_port  # noqa: E402

FLIPS = textwrap.dedent(
    """
    import http.server, sys, time
    port, at = int(sys.argv[1]), float(sys.argv[2])

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if time.time() >= at else 503)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
    """
)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    spec = ServerSpec(command=("flips",), ready_url="/health")
    delays = []
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp, "flips.py")
        script.write_text(FLIPS)
        for i in range(args.rounds):
            port = free_port()
            # 1 s after the start (the poll has reached its cap), at a different phase each round
            at = time.time() + 1.0 + 0.013 * i
            server = Server(
                [sys.executable, str(script), str(port), str(at)],
                dict(os.environ),
                Path(tmp, f"{i}.log"),
            )
            try:
                server.wait_ready(spec, port, 30.0)
                delays.append(time.time() - at)
            finally:
                os.killpg(server.proc.pid, signal.SIGKILL)
                server.proc.wait()
    print("delay from the first 200 to ready (ms):", [round(d * 1e3) for d in delays])
    print(
        f"readiness detected: median {statistics.median(delays) * 1e3:.0f} ms, worst "
        f"{max(delays) * 1e3:.0f} ms over {len(delays)} rounds; target <= 100 ms"
    )


if __name__ == "__main__":
    main()
