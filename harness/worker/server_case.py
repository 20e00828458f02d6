"""One attempt of a ``kind = "server"`` case, inside the worker: start the server, wait until it
is ready, send the requests, take their outputs, stop the server, read its perf log.

The server runs in a process group of its own (``start_new_session``), with its output in
``<attempt output>/server/server.log`` and ``HARNESS_PERF_LOG`` naming
``<attempt output>/server/perf``. Start-up is the stage ``server.startup`` (seconds until
ready), each request the stage ``server.request`` (as the client saw it), the stop after the
last request ``server.stop``. Each answer's outputs are written, hashed and scanned on a
thread of their own while the next request is in flight
(:class:`harness.worker.server_answers.Outputs`). Readiness is polled with backoff (10 ms
doubling to 50 ms); a server that exits first fails the attempt at once with its exit code or
signal and the last 200 lines of its log. On a timeout (not ready in time, a request without an
answer) the server's tree is diagnosed before it is stopped
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

import json
import os
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness import probe
from harness.model import Case
from harness.model.hang import HangDiagnosis
from harness.model.provenance import CHECKOUT_ENV, TARGET_FILE
from harness.model.server import RequestSpec, ServerSpec
from harness.worker import server_pool
from harness.worker.case_errors import ServerError
from harness.worker.command_file import command_file
from harness.worker.hang_diagnosis import diagnose
from harness.worker.server_answers import Outputs
from harness.worker.server_perf import note_code_files, record_perf_log
from harness.worker.server_process import (
    _HOST,
    TAIL_LINES,
    Server,
    _fill,
    free_port,
    log_tail,
    server_env,
)

# The note naming the file a server's command runs (code provenance reads every note that ends
# in ``harness.target_file``).
COMMAND_FILE = "server.command." + TARGET_FILE
BODY_CHARS = 2000


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


def _start(case: Case, folder: Path, limit_s: float, platform: str) -> tuple[Server, int, Path]:
    """Start ``case``'s server with its files in ``folder`` and wait until it is ready (the
    stage ``server.startup``): the server, its port and its perf-log folder. A server that
    is not ready is diagnosed (on a timeout), stopped, and its :class:`ServerError` raised."""
    spec = case.server
    assert spec is not None
    perf = folder / "perf"
    perf.mkdir(parents=True, exist_ok=True)
    log = folder / "server.log"
    port = free_port()
    argv = [_fill(a, port) for a in spec.command]
    # The server runs in the side's checkout (a comparison's worker names it), so that each
    # side starts its own: ``python -m`` puts it first on the path and a relative script path
    # in the command is that checkout's; elsewhere in the worker's working folder.
    cwd = os.environ.get(CHECKOUT_ENV) or None
    env = server_env(spec, port, perf)
    server = Server(argv, env, log, cwd=cwd, die_with_worker=spec.name is not None)
    # The file the command runs (``python -m pkg.serve``, a script), for code provenance where
    # the server never calls probe.request; a console script resolves to nothing. Noted on
    # every attempt the server serves (a shared one's too).
    server.cwd = cwd or os.getcwd()
    server.code_file = command_file(argv, env, server.cwd)
    _note_where(server)
    try:
        with probe.stage("server.startup"):
            server.wait_ready(spec, port, min(spec.ready_timeout_s, limit_s))
    except ServerError as exc:
        _stop_failed(exc, server, spec, platform)
        raise
    except BaseException:
        _stop_failed(None, server, spec, platform)
        raise
    return server, port, perf


def _note_where(server: Server) -> None:
    probe.note("server.cwd", server.cwd)
    if server.code_file is not None:
        probe.note(COMMAND_FILE, server.code_file)


def _stop_failed(exc: ServerError | None, server: Server, spec: ServerSpec, platform: str) -> None:
    """Diagnose a timed-out server before the kill (into ``exc``), then stop it."""
    if exc is not None and exc.status == "timeout" and server.proc.poll() is None:
        trigger = "readiness timeout" if exc.kind == "ServerNotReady" else "request timeout"
        exc.diagnosis = diagnose(server.proc.pid, trigger=trigger, platform=platform)
        exc.args = (f"{exc.args[0]}\n{diagnosis_summary(exc.diagnosis)}",)
    left = server.stop(spec.stop_timeout_s)
    if left:
        probe.note("server.left_behind", _left_text(left, spec))


def _shared(
    case: Case, outputs: Path, tag: str, limit_s: float, platform: str
) -> server_pool.Shared:
    """The running shared server ``case`` names, started now if this worker has none."""
    spec = case.server
    assert spec is not None and spec.name is not None
    name = spec.name
    shared = server_pool.get(name)
    if shared is not None and shared.spec != spec:
        differ = server_pool.differences(shared.spec, spec)
        raise ServerError(
            "error",
            "SharedServerMismatch",
            f"case '{case.id}' ({case.source}) names server '{name}', which "
            f"{shared.started_by} started from a different [case.server] table (they differ "
            f"in {', '.join(differ)}): every case naming one server must declare the same "
            "table, or use a name of its own",
        )
    if shared is not None and shared.server.proc.poll() is not None:
        server_pool.forget(name)
        gone = shared.server.exited(f"after {shared.uses} case attempt(s), before this one")
        probe.note("server.shared_died", True)
        raise ServerError(
            "error",
            "SharedServerDied",
            f"the shared server '{name}' (started by {shared.started_by}) was found dead when "
            f"case '{case.id}' began, before it sent anything (infrastructure, not this "
            f"case's failure; the next attempt starts it again): {gone}",
        )
    if shared is None:
        folder = server_pool.folder_for(name, outputs)
        t0 = time.perf_counter()
        server, port, _ = _start(case, folder, limit_s, platform)
        shared = server_pool.Shared(
            name,
            spec,
            server,
            port,
            folder,
            f"case '{case.id}' #{tag.rsplit('-', 1)[-1]}",
            time.perf_counter() - t0,
        )
        server_pool.keep(shared)
    else:
        # Reused: no start-up here; the attempt that paid it has the stage server.startup.
        probe.note("server.started_by", shared.started_by)
        _note_where(shared.server)
    shared.uses += 1
    probe.note("server.shared", name)
    return shared


def run_server_case(
    case: Case,
    output_dir: Path | None,
    tag: str,
    limit_s: float,
    platform: str = "cpu",
    *,
    last_use: bool = False,
) -> None:
    """Run ``case`` (``kind = "server"``) once; ``tag`` names its requests, ``limit_s`` bounds
    start-up. Raises :class:`ServerError` when it does not pass; on a timeout (not ready in
    time, a request without an answer) it carries the hang diagnosis taken before the kill.

    A case whose server has a ``name`` uses the worker's running server of that name
    (:mod:`harness.worker.server_pool`), starting it if there is none; it is stopped after
    this attempt when ``last_use`` says no later case of the run needs it, or when this
    attempt timed out or its server exited."""
    spec = case.server
    assert spec is not None, "run_server_case needs a server case"
    base = output_dir if output_dir is not None else Path(tempfile.mkdtemp(prefix="harness-"))
    probe.note("server.ranks", spec.ranks)
    if spec.name is not None:
        try:
            # <run>/outputs/<case>/<attempt>: the shared server's files go to <run>/outputs
            outputs = base.parent.parent if output_dir is not None else base
            shared = _shared(case, outputs, tag, limit_s, platform)
        except ServerError as exc:
            if last_use and exc.kind == "SharedServerMismatch":  # no later case needs it
                left = server_pool.stop(spec.name)
                if left:
                    probe.note("server.left_behind", _left_text(left, spec))
            raise
        server, port, perf = shared.server, shared.port, shared.folder / "perf"
    else:
        server, port, perf = _start(case, base / "server", limit_s, platform)
    probe.note("server.port", port)
    probe.note("server.log", str(server.log))
    several = len(case.requests) > 1
    ids: dict[str, str] = {}
    answers = Outputs()
    try:
        import httpx

        try:
            with httpx.Client(trust_env=False, timeout=spec.request_timeout_s) as client:
                for i, req in enumerate(case.requests):
                    prefix = f"r{i}." if several else ""
                    rid = str(req.json.get("request_id") or f"{tag}-{i}")
                    ids[rid] = prefix
                    answer = _send(client, server, port, i, req, rid)
                    answers.take(i, req, answer, prefix)
        except BaseException:
            answers.finish(errors=False)  # the request's error is the attempt's
            raise
        answers.finish()
    except ServerError as exc:
        # A shared server that still runs and answered (a 500, a missing output) stays up
        # for the next case; a timed-out or dead one is stopped.
        if spec.name is None or exc.status == "timeout" or server.proc.poll() is not None:
            _stop_failed(exc, server, spec, platform)
            _forget(spec)
        note_code_files(perf, ids)
        raise
    except BaseException:
        _stop_failed(None, server, spec, platform)
        _forget(spec)
        note_code_files(perf, ids)
        raise
    if spec.name is not None and not last_use:
        record_perf_log(perf, ids)
        return
    with probe.stage("server.stop"):
        left = server.stop(spec.stop_timeout_s)
    _forget(spec)
    probe.note("server.exit_code", server.proc.returncode)
    record_perf_log(perf, ids)
    if left:
        raise ServerError("error", "ServerLeftProcesses", _left_text(left, spec))


def _forget(spec: ServerSpec) -> None:
    if spec.name is not None:
        server_pool.forget(spec.name)


def _left_text(left: Mapping[int, str], spec: ServerSpec) -> str:
    listed = "; ".join(f"pid {pid}: {cmd[:200]}" for pid, cmd in sorted(left.items()))
    return (
        f"the server's process group still had {len(left)} process(es) running "
        f"{spec.stop_timeout_s:g} s after SIGTERM (killed with SIGKILL): {listed}"
    )
