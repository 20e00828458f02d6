"""Start ``python -m tinyav.serve`` as a real process for the tests in tests/serve (a module of
its own, not conftest: ``from conftest import`` would find another folder's conftest when the
whole suite runs)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TARGET = ROOT / "targets" / "tinyav"

READY_TIMEOUT_S = 120.0


def target_env(**extra: str) -> dict[str, str]:
    """The environment of a subprocess that imports this checkout's tinyav and harness."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TARGET), str(ROOT), env.get("PYTHONPATH", "")])
    env["TINYAV_NUM_THREADS"] = "1"
    env.update(extra)
    return env


@dataclass
class Server:
    """A ``tinyav.serve`` process, its port and its log file."""

    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_ready(self) -> None:
        """Poll ``/health`` until it answers 200; fail at once if the process exits."""
        import httpx

        deadline = time.monotonic() + READY_TIMEOUT_S
        # one client for every poll: each `httpx.get` made a client and its TLS context (~19 ms
        # of CPU), ten times a second while the server imports torch
        with httpx.Client(trust_env=False, timeout=2) as client:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    pytest.fail(f"server exited {self.proc.returncode}:\n{self.log_text()[-3000:]}")
                try:
                    if client.get(f"{self.url}/health").status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                time.sleep(0.1)
        self.proc.kill()
        pytest.fail(f"server not ready in {READY_TIMEOUT_S} s:\n{self.log_text()[-3000:]}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def terminate(self) -> int:
        """SIGTERM, then its exit code (killed, and the test failed, after 60 s)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            pytest.fail(f"server ignored SIGTERM for 60 s:\n{self.log_text()[-3000:]}")


def start_server(tp: int, folder: Path) -> Server:
    """Start ``python -m tinyav.serve --tp <tp>`` on a free port with its perf log in
    ``folder/perf`` and its output in ``folder/server.log``, and wait until it is ready (a
    caller kills it in a ``finally`` if a test fails before it terminates it)."""
    from tinyav.serve.distributed import free_port

    port = free_port()
    log = folder / "server.log"
    with log.open("wb") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tinyav.serve", "--port", str(port), "--tp", str(tp)],
            stdout=fh,
            stderr=subprocess.STDOUT,
            env=target_env(HARNESS_PERF_LOG=str(folder / "perf")),
        )
    server = Server(proc, port, log)
    try:
        server.wait_ready()
    except BaseException:
        server.kill()
        raise
    return server
