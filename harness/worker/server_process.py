"""A server process a server case starts: its command filled in (``{port}``, ``{python}``), its
environment, its process group of its own, readiness polled with backoff, and its stop
(SIGTERM to the group, then SIGKILL to what is left, which is reported). Used by
:mod:`harness.worker.server_case` (one server per case, or a named one shared by several
cases: :mod:`harness.worker.server_pool`) and :mod:`harness.worker.ranks_case`."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from harness import probe
from harness.model.server import ServerSpec
from harness.worker.case_errors import ServerError

TAIL_LINES = 200
_POLL_FIRST_S = 0.01
_POLL_CAP_S = 0.05  # a 200 is seen within 100 ms even with a slow poll (measured)
_HOST = "127.0.0.1"


def free_port() -> int:
    """A TCP port on the loopback that nothing listens on now (picked right before use)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((_HOST, 0))
        return int(s.getsockname()[1])


def _fill(text: str, port: int) -> str:
    return text.replace("{port}", str(port)).replace("{python}", sys.executable)


def _harness_root() -> str | None:
    """The source folder this harness runs from (None when installed in site-packages)."""
    root = Path(probe.__file__).resolve().parents[2]
    return None if root.name in ("site-packages", "dist-packages") else str(root)


def server_env(spec: ServerSpec, port: int, perf: Path) -> dict[str, str]:
    """The server's environment: the worker's (its ``PYTHONPATH`` leads with the side's code
    roots), this harness's source folder last on ``PYTHONPATH`` (so ``harness.probe`` in the
    server is this one), the perf-log folder, then the case's ``env``."""
    env = dict(os.environ)
    env.pop("HARNESS_RESULT_FILE", None)
    paths = [env.get("PYTHONPATH", ""), _harness_root() or ""]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    env["HARNESS_PERF_LOG"] = str(perf)
    env.update({k: _fill(v, port) for k, v in spec.env.items()})
    return env


def exit_text(code: int) -> str:
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"with exit code {code}"


def log_tail(log: Path, lines: int = TAIL_LINES) -> str:
    """The last ``lines`` lines of the server's log (at most its last MiB)."""
    try:
        with log.open("rb") as fh:
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - (1 << 20)))
            data = fh.read()
    except OSError as e:
        return f"(cannot read {log}: {e})"
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])


def group_members(pgid: int, *, zombies: bool = False) -> dict[int, str]:
    """Processes of process group ``pgid``: pid -> command line (Linux). Live ones, or with
    ``zombies`` the ended ones not yet reaped."""
    found: dict[int, str] = {}
    if not os.path.isdir("/proc"):
        return found
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
            if int(fields[2]) != pgid or (fields[0] in (b"Z", b"X")) != zombies:
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
        except (OSError, IndexError, ValueError):
            continue
        found[int(entry)] = cmd
    return found


def _reap(pids: Sequence[int], block: bool) -> None:
    """Collect the exit status of those ``pids`` that are this process's children."""
    for pid in pids:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, 0 if block else os.WNOHANG)


def _term_with_parent() -> Callable[[], None] | None:
    """For a server that outlives attempts (a shared one): the kernel sends its leader SIGTERM
    when the worker dies (a worker killed with its manager cannot stop it itself). The C
    function is resolved here, so the child only calls it."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1

    def child() -> None:
        prctl(pr_set_pdeathsig, signal.SIGTERM)

    return child


class Server:
    """A started server: its process (the group leader), command and log."""

    def __init__(
        self,
        argv: list[str],
        env: Mapping[str, str],
        log: Path,
        cwd: str | None = None,
        *,
        die_with_worker: bool = False,
    ) -> None:
        self.argv = argv
        self.log = log
        with log.open("wb") as fh:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=fh,
                stderr=subprocess.STDOUT,
                env=dict(env),
                cwd=cwd,
                start_new_session=True,
                preexec_fn=_term_with_parent() if die_with_worker else None,
            )
        self.started = time.monotonic()
        # Where it runs and the file its command runs (code provenance), set by its starter.
        self.cwd = cwd or os.getcwd()
        self.code_file: str | None = None
        self._log_pos = 0
        self._log_text = ""

    def exited(self, when: str) -> ServerError | None:
        """The error to raise when the server has exited (None while it runs)."""
        code = self.proc.poll()
        if code is None:
            return None
        return ServerError(
            "failed",
            "ServerExited",
            f"the server exited {exit_text(code)} {when} "
            f"({time.monotonic() - self.started:.1f} s after start); command {self.argv}; "
            f"last {TAIL_LINES} lines of its log {self.log}:\n{log_tail(self.log)}",
        )

    def _log_matches(self, pattern: re.Pattern[str]) -> bool:
        with contextlib.suppress(OSError), self.log.open("rb") as fh:
            fh.seek(self._log_pos)
            data = fh.read()
            self._log_pos += len(data)
            # Keep the last 64 KiB, so a line written in two pieces still matches.
            self._log_text = (self._log_text + data.decode("utf-8", "replace"))[-65536:]
        return pattern.search(self._log_text) is not None

    def wait_ready(self, spec: ServerSpec, port: int, timeout_s: float) -> None:
        """Return once every readiness probe of ``spec`` holds; raise at once if the server
        exits first, or when ``timeout_s`` passes."""
        import httpx

        url = f"http://{_HOST}:{port}{spec.ready_url}" if spec.ready_url else None
        pattern = re.compile(spec.ready_log) if spec.ready_log else None
        url_ok, log_ok = url is None, pattern is None
        delay = _POLL_FIRST_S
        with httpx.Client(trust_env=False, timeout=1.0) as client:
            while True:
                if not log_ok and pattern is not None:
                    log_ok = self._log_matches(pattern)
                if not url_ok and url is not None:
                    with contextlib.suppress(httpx.HTTPError):
                        url_ok = client.get(url).status_code == 200
                if url_ok and log_ok:
                    return
                gone = self.exited("before it was ready")
                if gone is not None:
                    raise gone
                if time.monotonic() - self.started > timeout_s:
                    waiting = [w for w, ok in ((url, url_ok), (spec.ready_log, log_ok)) if not ok]
                    raise ServerError(
                        "timeout",
                        "ServerNotReady",
                        f"the server was not ready within {timeout_s:g} s (waiting for "
                        f"{' and '.join(repr(w) for w in waiting)}); command {self.argv}; last "
                        f"{TAIL_LINES} lines of its log {self.log}:\n{log_tail(self.log)}",
                    )
                time.sleep(delay)
                delay = min(delay * 2, _POLL_CAP_S)

    def stop(self, grace_s: float) -> dict[int, str]:
        """SIGTERM to the group; after ``grace_s`` SIGKILL to what is left of it. Returns the
        processes that were still alive then (pid -> command line), killed and reaped.

        The leader is waited for first (a blocking wait, no work while it shuts down); the
        group is listed (a walk over /proc) only once it has exited, then with backoff until
        the group is empty. Listing it every 20 ms from the SIGTERM on took ~0.7 s of CPU
        per stop on a loaded 2-core machine, in competition with the server's own exit."""
        pgid = self.proc.pid
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=grace_s)
        members = group_members(pgid)
        delay = _POLL_FIRST_S
        while members and time.monotonic() < deadline:
            # Descendants reparented to the worker (a subreaper) are its children to reap.
            _reap(list(group_members(pgid, zombies=True)), block=False)
            time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, _POLL_CAP_S)
            members = group_members(pgid)
        self.proc.poll()
        left = dict(members)
        if self.proc.returncode is None:
            left.setdefault(self.proc.pid, " ".join(self.argv))
        if left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
            self.proc.wait()
            _reap([p for p in left if p != self.proc.pid], block=True)
        _reap(list(group_members(pgid, zombies=True)), block=False)
        return left
