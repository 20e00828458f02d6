"""A tiny HTTP server for the server-case fault tests: ``python fake_server.py PORT MODE``.

``GET`` answers 200 ``{"status": "ok"}``. ``POST`` answers by MODE: ``500`` a 500 with a JSON
detail, ``badjson`` a 200 whose body is not JSON, ``ok`` a 200 with a base64 text output.
MODE ``daemon`` answers as ``ok`` and starts, in the server's process group, a child that ignores
SIGTERM (its pid written to the file named by ``FAKE_CHILD_PID``): a server that leaves a
process behind. MODE ``taken`` finds its port already taken (it holds it itself) and fails to
bind, as a server does when another process got the port first. MODE ``stuck`` never becomes
ready: it starts a "rank 1" (this script in MODE ``rank1``, ``RANK=1`` in its environment) that
waits in ``stuck_in_collective()``, and itself loops in ``stuck_in_warmup()``. MODE ``hang``
is ready but never answers a POST (it loops in ``stuck_in_request()``). A POST to ``/v1/die``
is answered as ``ok`` and then the server exits with code 7 (a shared server that dies between
cases). Every ``ok`` answer carries the server's pid (``pid.b64``). SIGTERM ends the server;
SIGUSR1 dumps every thread's stack to stderr (faulthandler), as tinyav.serve does.
"""

from __future__ import annotations

import base64
import faulthandler
import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Any

port, mode = int(sys.argv[1]), sys.argv[2]
CHILD = (
    "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print('ignoring SIGTERM', flush=True); sys.stdout.close(); time.sleep(300)"
)


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.answer(200, b'{"status": "ok"}')

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if mode == "hang":
            stuck_in_request()
        if mode == "500":
            self.answer(500, b'{"detail": "kaboom: the engine fell over"}')
        elif mode == "badjson":
            self.answer(200, b'{"video": {"b64": ')
        else:
            text = base64.b64encode(b"hello from the server").decode()
            pid = base64.b64encode(str(os.getpid()).encode()).decode()
            self.answer(200, json.dumps({"result": {"b64": text}, "pid": {"b64": pid}}).encode())
        if self.path == "/v1/die":
            self.wfile.flush()
            os._exit(7)

    def answer(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def stuck_in_warmup() -> None:
    while True:
        time.sleep(0.05)


def stuck_in_collective() -> None:
    while True:
        time.sleep(0.05)


def stuck_in_request() -> None:
    while True:
        time.sleep(0.05)


def main() -> None:
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    if mode == "rank1":
        stuck_in_collective()
    if mode == "stuck":
        env = dict(os.environ, RANK="1")
        subprocess.Popen([sys.executable, __file__, str(port), "rank1"], env=env)
        print("warming up", flush=True)
        stuck_in_warmup()
    if mode == "daemon":
        child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE)
        # ready only once the child ignores SIGTERM: on a loaded machine the stop's SIGTERM
        # could otherwise reach it before its handler was set, and nothing would be left
        assert child.stdout is not None and child.stdout.readline() == b"ignoring SIGTERM\n"
        with open(os.environ["FAKE_CHILD_PID"], "w") as fh:
            fh.write(str(child.pid))
    if mode == "taken":
        holder = socket.socket()
        holder.bind(("127.0.0.1", port))
        holder.listen()
    server = http.server.HTTPServer(("127.0.0.1", port), Handler)
    print(f"fake server ready on {port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
