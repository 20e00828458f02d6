"""Named servers that several server cases share, kept by the worker between their attempts.

A case whose ``[case.server]`` has ``name = "tinyav-tp1"`` asks for that server: the first such
attempt in a worker starts it (its ``server.startup`` stage is that attempt's, and only its),
the later ones find it here and send their requests to it. Every case naming a server must
declare the same table (command, env, ranks, readiness, timeouts): a case that differs is an
error naming both cases and the keys, never a silent reuse of a server it did not describe.

The server is stopped (SIGTERM to its group, then SIGKILL, leftovers reported) after the
attempt the manager marks as the last use of it in the run (``AttemptJob.server_last``),
after an attempt that timed out or found it broken, and otherwise when the worker exits (run
end, a replaced worker, a comparison's round end: each side's worker keeps its own, started in
its own checkout), then with what it left behind written to the worker's log. A server found
dead when an attempt begins is that attempt's infrastructure error (``SharedServerDied``,
retried as such), never the case's failure, and the next attempt starts it again.

Cases sharing a server share whatever the server keeps between requests: a result must not
depend on which case ran first. The harness cannot see inside a server; what it does is give
every request its own ``request_id`` and each case its own seed, and reading the server-side
records by request id only. A server that caches or learns between requests is the case
author's to declare unshared (no ``name``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from harness.model.server import ServerSpec
from harness.worker.leftovers import KEPT
from harness.worker.server_process import Server, log_tail


@dataclass
class Shared:
    """A running shared server: who started it, where it listens, its files."""

    name: str
    spec: ServerSpec
    server: Server
    port: int
    folder: Path  # server.log and the perf log
    started_by: str  # "<case id> #<attempt index>"
    startup_s: float
    uses: int = 0


_SHARED: dict[str, Shared] = {}
_STARTS: dict[str, int] = {}  # start-ups per name in this worker (numbers the folders)


def differences(a: ServerSpec, b: ServerSpec) -> list[str]:
    """The keys of ``[case.server]`` in which two declarations of one server differ."""
    return [
        f.name
        for f in dataclasses.fields(ServerSpec)
        if f.name != "name" and getattr(a, f.name) != getattr(b, f.name)
    ]


def get(name: str) -> Shared | None:
    return _SHARED.get(name)


def folder_for(name: str, outputs: Path) -> Path:
    """A folder of its own for the next start-up of ``name``:
    ``<run outputs>/_servers/<name>-<n>-<random>``. Never one another worker could pick: in a
    comparison both sides' workers start a server of that name in the same run folder, and
    each must read its own server's log and perf lines (their request ids are alike)."""
    _STARTS[name] = _STARTS.get(name, 0) + 1
    root = outputs / "_servers"
    root.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f"{name}-{_STARTS[name]}-", dir=root))


def keep(shared: Shared) -> None:
    _SHARED[shared.name] = shared
    KEPT.add(shared.server.proc.pid)


def forget(name: str) -> None:
    shared = _SHARED.pop(name, None)
    if shared is not None:
        KEPT.discard(shared.server.proc.pid)


def stop(name: str) -> dict[int, str]:
    """Stop the shared server ``name`` (graceful, then killed): what was left running."""
    shared = _SHARED.get(name)
    if shared is None:
        return {}
    try:
        return shared.server.stop(shared.spec.stop_timeout_s)
    finally:
        forget(name)


def stop_all() -> None:
    """At the worker's exit: stop every shared server, and say in the worker's log what each
    left behind (there is no attempt left to report it on)."""
    for name in list(_SHARED):
        shared = _SHARED[name]
        t0 = time.monotonic()
        left = stop(name)
        code = shared.server.proc.returncode
        line = (
            f"harness worker: shared server '{name}' (started by {shared.started_by}, "
            f"{shared.uses} case attempt(s)) stopped at worker exit in "
            f"{time.monotonic() - t0:.1f} s, exit code {code}"
        )
        if left:
            listed = "; ".join(f"pid {p}: {c[:200]}" for p, c in sorted(left.items()))
            line += f"; LEFT BEHIND (killed with SIGKILL): {listed}"
        with contextlib.suppress(OSError, ValueError):
            print(line, file=sys.stderr, flush=True)
            if left:
                print(log_tail(shared.server.log, 20), file=sys.stderr, flush=True)


__all__ = [
    "Shared",
    "differences",
    "folder_for",
    "forget",
    "get",
    "keep",
    "stop",
    "stop_all",
]
