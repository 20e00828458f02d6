"""One attempt of a ``kind = "server"`` case, inside the worker: start the server, wait until it
is ready, send the requests, take their outputs, stop the server, read its perf log.

The server runs in a process group of its own (``start_new_session``), with its output in
``<attempt output>/server/server.log`` and ``HARNESS_PERF_LOG`` naming
``<attempt output>/server/perf``. Start-up is the stage ``server.startup`` (seconds until
ready), each request the stage ``server.request`` (as the client saw it). Readiness is polled
with backoff (10 ms doubling to 50 ms); a server that exits first fails the attempt at once
with its exit code or signal and the last 200 lines of its log. On a timeout (not ready in time,
a request without an answer) the server's tree is diagnosed before it is stopped
(:mod:`harness.worker.hang_diagnosis`: every process's rank, stacks, CPU, log growth, under one
10 s deadline); the record goes to the attempt (``Attempt.hang``). Stopping sends SIGTERM to the
group, waits ``stop_timeout_s`` for every process of it to end, then SIGKILLs what is left and
fails the attempt naming each such process: a server must not leave anything behind. (A daemon
that left the group with ``setsid`` is still the worker's child, the worker being a subreaper,
and the worker's leftover check reports it.)

From the perf log (:mod:`harness.probe.perflog`), the lines of this attempt's requests (matched
by ``request_id``: the harness adds ``"<case>-<attempt>-<i>"`` to a body that has none) give
rank 0's stages and fingerprints to the attempt, as if the target had recorded them; the other
ranks' stage seconds become notes ``server.rank<R>.<stage>``. With several requests, stages
accumulate (as a stage entered twice does) and fingerprints and outputs are prefixed
``r<i>.``; with one request names are as declared.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness import probe
from harness.model import Case
from harness.model.hang import HangDiagnosis
from harness.model.provenance import CHECKOUT_ENV, TARGET_FILE
from harness.model.server import OutputSpec, RequestSpec, ServerSpec
from harness.worker.case_errors import ServerError
from harness.worker.command_file import command_file
from harness.worker.hang_diagnosis import diagnose
from harness.worker.server_perf import note_code_files, record_perf_log

TAIL_LINES = 200
# The note naming the file a server's command runs (code provenance reads every note that ends
# in ``harness.target_file``).
COMMAND_FILE = "server.command." + TARGET_FILE
BODY_CHARS = 2000
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


class Server:
    """A started server: its process (the group leader), command and log."""

    def __init__(
        self, argv: list[str], env: Mapping[str, str], log: Path, cwd: str | None = None
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
            )
        self.started = time.monotonic()
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
        processes that were still alive then (pid -> command line), killed and reaped."""
        pgid = self.proc.pid
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        members = group_members(pgid)
        while time.monotonic() < deadline:
            self.proc.poll()
            members = group_members(pgid)
            if self.proc.returncode is not None and not members:
                break
            # Descendants reparented to the worker (a subreaper) are its children to reap.
            _reap(list(group_members(pgid, zombies=True)), block=False)
            time.sleep(0.02)
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


def _field(answer: Any, dotted: str) -> Any:
    value = answer
    for part in dotted.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            raise KeyError(part)
    return value


def _output_bytes(value: Any, spec: OutputSpec) -> bytes:
    if spec.decode == "json":
        return json.dumps(value, indent=1).encode()
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {type(value).__name__}")
    if spec.decode == "text":
        return value.encode()
    return base64.b64decode(value, validate=True)


def _take_outputs(i: int, req: RequestSpec, answer: Any, prefix: str) -> None:
    for name, spec in req.outputs.items():
        try:
            data = _output_bytes(_field(answer, spec.field), spec)
            meta: dict[str, Any] = {
                k: _field(answer, v) if isinstance(v, str) else v for k, v in spec.meta.items()
            }
        except (KeyError, ValueError, TypeError) as e:
            keys = sorted(answer) if isinstance(answer, dict) else type(answer).__name__
            raise ServerError(
                "failed",
                "ServerAnswerMissingOutput",
                f"request #{i} ({req.path}): output '{name}' (field '{spec.field}' decoded as "
                f"{spec.decode}, meta {dict(spec.meta)}) is not in the answer "
                f"({type(e).__name__}: {e}); the answer's keys: {keys}",
            ) from None
        with probe.output_file(f"{prefix}{name}", spec.suffix, **meta, kind=spec.kind) as path:
            path.write_bytes(data)


def _send(client: Any, server: Server, port: int, i: int, req: RequestSpec, rid: str) -> Any:
    """POST request ``i`` and return its JSON answer; any failure is a :class:`ServerError`."""
    import httpx

    body = {**req.json}
    body.setdefault("request_id", rid)
    url = f"http://{_HOST}:{port}{req.path}"
    try:
        with probe.stage("server.request"):
            r = client.post(url, json=body)
    except httpx.TimeoutException as e:
        raise ServerError(
            "timeout",
            "ServerRequestTimeout",
            f"request #{i} POST {req.path} got no answer within {client.timeout.read:g} s "
            f"({type(e).__name__}); last {TAIL_LINES} lines of the server's log:\n"
            f"{log_tail(server.log)}",
        ) from None
    except httpx.HTTPError as e:
        gone = server.exited(f"during request #{i} POST {req.path}")
        raise gone or ServerError(
            "failed", "ServerRequestFailed", f"request #{i} POST {req.path} failed: {e}"
        ) from None
    text = r.text
    short = text[:BODY_CHARS] + (f"... ({len(text)} characters)" if len(text) > BODY_CHARS else "")
    if not 200 <= r.status_code < 300:
        raise ServerError(
            "failed",
            "ServerRequestFailed",
            f"request #{i} POST {req.path} answered {r.status_code} {r.reason_phrase}: {short}",
        )
    try:
        return json.loads(text)
    except ValueError as e:
        raise ServerError(
            "failed",
            "ServerRequestFailed",
            f"request #{i} POST {req.path} answered {r.status_code} with malformed JSON "
            f"({e}): {short}",
        ) from None


def diagnosis_summary(d: HangDiagnosis) -> str:
    """One line per process for the error message: where each was, by rank."""
    lines = [f"hang diagnosis ({d.seconds:.1f} s, before the kill):"]
    for p in d.processes:
        rank = f"rank {p.rank}" if p.rank is not None else "rank ?"
        where = p.where or f"stack {p.stack_method}"
        grow = {True: "log growing", False: "log not growing", None: "no log"}[p.log_growing]
        cpu = f"{p.cpu_percent:g}% CPU" if p.cpu_percent is not None else "CPU ?"
        lines.append(f"  pid {p.pid} ({rank}): {where}; {cpu}; {grow} [{p.stack_method}]")
    return "\n".join(lines)


def run_server_case(
    case: Case, output_dir: Path | None, tag: str, limit_s: float, platform: str = "cpu"
) -> None:
    """Run ``case`` (``kind = "server"``) once; ``tag`` names its requests, ``limit_s`` bounds
    start-up. Raises :class:`ServerError` when it does not pass; on a timeout (not ready in
    time, a request without an answer) it carries the hang diagnosis taken before the kill."""
    spec = case.server
    assert spec is not None, "run_server_case needs a server case"
    base = output_dir if output_dir is not None else Path(tempfile.mkdtemp(prefix="harness-"))
    folder = base / "server"
    perf = folder / "perf"
    perf.mkdir(parents=True, exist_ok=True)
    log = folder / "server.log"
    port = free_port()
    argv = [_fill(a, port) for a in spec.command]
    probe.note("server.port", port)
    probe.note("server.ranks", spec.ranks)
    probe.note("server.log", str(log))
    # The server runs in the side's checkout (a comparison's worker names it), so that each
    # side starts its own: ``python -m`` puts it first on the path and a relative script path
    # in the command is that checkout's; elsewhere in the worker's working folder.
    cwd = os.environ.get(CHECKOUT_ENV) or None
    probe.note("server.cwd", cwd or os.getcwd())
    env = server_env(spec, port, perf)
    server = Server(argv, env, log, cwd=cwd)
    # The file the command runs (``python -m pkg.serve``, a script), for code provenance where
    # the server never calls probe.request; a console script resolves to nothing.
    code = command_file(argv, env, cwd or os.getcwd())
    if code is not None:
        probe.note(COMMAND_FILE, code)
    several = len(case.requests) > 1
    ids: dict[str, str] = {}
    try:
        with probe.stage("server.startup"):
            server.wait_ready(spec, port, min(spec.ready_timeout_s, limit_s))
        import httpx

        with httpx.Client(trust_env=False, timeout=spec.request_timeout_s) as client:
            for i, req in enumerate(case.requests):
                prefix = f"r{i}." if several else ""
                rid = str(req.json.get("request_id") or f"{tag}-{i}")
                ids[rid] = prefix
                answer = _send(client, server, port, i, req, rid)
                _take_outputs(i, req, answer, prefix)
    except ServerError as exc:
        if exc.status == "timeout" and server.proc.poll() is None:
            trigger = "readiness timeout" if exc.kind == "ServerNotReady" else "request timeout"
            exc.diagnosis = diagnose(server.proc.pid, trigger=trigger, platform=platform)
            exc.args = (f"{exc.args[0]}\n{diagnosis_summary(exc.diagnosis)}",)
        left = server.stop(spec.stop_timeout_s)
        if left:
            probe.note("server.left_behind", _left_text(left, spec))
        note_code_files(perf, ids)
        raise
    except BaseException:
        left = server.stop(spec.stop_timeout_s)
        if left:
            probe.note("server.left_behind", _left_text(left, spec))
        note_code_files(perf, ids)
        raise
    left = server.stop(spec.stop_timeout_s)
    probe.note("server.exit_code", server.proc.returncode)
    record_perf_log(perf, ids)
    if left:
        raise ServerError("error", "ServerLeftProcesses", _left_text(left, spec))


def _left_text(left: Mapping[int, str], spec: ServerSpec) -> str:
    listed = "; ".join(f"pid {pid}: {cmd[:200]}" for pid, cmd in sorted(left.items()))
    return (
        f"the server's process group still had {len(left)} process(es) running "
        f"{spec.stop_timeout_s:g} s after SIGTERM (killed with SIGKILL): {listed}"
    )
