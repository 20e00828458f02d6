"""Manager side of the zygote (:mod:`harness.worker.zygote`): start one per interpreter and
environment (or connect to the shared one, :mod:`harness.execution.zygote_service`), and ask it
for workers (:mod:`harness.execution.zygote_link`).

Anything that goes wrong on this path (the zygote will not start, dies, refuses a code root)
makes :func:`fork_worker` return None and the pool spawns the worker plainly: the zygote only
saves time, it never decides a result. ``HARNESS_FORK_WORKERS=0`` turns it off.

With ``HARNESS_ZYGOTE_DIR`` set, the zygotes are shared: every manager of this user with the
same interpreter, environment and harness source connects to one zygote listening in that
folder, which the first of them started, and which outlives them by ``HARNESS_ZYGOTE_IDLE``
seconds (30). A test suite or CI job that runs ``harness`` many times pays ``import torch``
once per environment instead of once per process. A comparison's rounds never use a shared
zygote (:func:`renew`).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import resource
import signal
import subprocess
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path

from harness.execution.zygote_link import ForkedProcess, Zygote
from harness.execution.zygote_service import SHARED_ENV, connect_shared
from harness.model.provenance import CHECKOUT_ENV

__all__ = ["ForkedProcess", "close_all", "enabled", "fork_worker", "prestart", "renew"]

# Variables that differ between workers of one zygote and that nothing reads at import time:
# the worker is given them in its environment after the fork. (The side's checkout differs
# between a comparison's two sides, whose pair of a round shares one zygote; pytest-xdist's
# worker name and run id differ between the workers of one `pytest harness/ -n N` session,
# whose managers then share one zygote where zygotes are shared.)
PER_WORKER_ENV = frozenset(
    {
        "PYTHONPATH",
        "HARNESS_REPLY_KEY_FD",
        "HARNESS_PLATFORM",
        "HARNESS_MANAGER_PID",
        "PYTEST_CURRENT_TEST",
        "PYTEST_XDIST_WORKER",
        "PYTEST_XDIST_WORKER_COUNT",
        "PYTEST_XDIST_TESTRUNUID",
        CHECKOUT_ENV,
    }
)
# And every variable of a CI job's own that starts with one of these: GitHub Actions names a
# file of each step's (GITHUB_STEP_SUMMARY) and says it is GitHub Actions, which the harness
# reads when it reports, never a library at import; the steps of one job then share a zygote.
PER_WORKER_PREFIXES = ("GITHUB_",)
# Zygotes kept alive at once (each holds torch's memory); the least recently used goes first.
MAX_ZYGOTES = 2
ENV_SWITCH = "HARNESS_FORK_WORKERS"


def enabled(environ: Mapping[str, str]) -> bool:
    return environ.get(ENV_SWITCH, "1").strip().lower() not in ("0", "false", "no", "off")


_zygotes: OrderedDict[tuple[object, ...], Zygote] = OrderedDict()
_shared: dict[tuple[object, ...], Zygote] = {}
_broken: set[tuple[object, ...]] = set()
_lock = threading.Lock()
_private_only = False  # set by renew(): from then on, no shared zygote in this process
# Private zygotes started by prestart() that have not said ready yet, and their logs.
_starting: dict[tuple[object, ...], Path] = {}


def _umask() -> int:
    """The process's umask, read without setting it (Linux >= 4.7), else set and put back."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    umask = os.umask(0o022)
    os.umask(umask)
    return umask


def _inherited() -> tuple[object, ...]:
    """What a spawned worker inherits from the manager besides its environment, as it is now:
    a zygote serves only a manager still in that state (a forked worker inherits the zygote's)."""
    umask = _umask()
    limits = tuple(
        resource.getrlimit(getattr(resource, name))
        for name in sorted(dir(resource))
        if name.startswith("RLIMIT_")
    )
    affinity = tuple(sorted(os.sched_getaffinity(0))) if hasattr(os, "sched_getaffinity") else ()
    return umask, limits, affinity, os.getpriority(os.PRIO_PROCESS, 0)


def _key(python: str, boot: str, env: dict[str, str], modules: Sequence[str]) -> tuple[object, ...]:
    return (python, boot, tuple(modules), tuple(sorted(env.items())), _inherited())


def _zygote(
    python: str, boot: str, env: dict[str, str], modules: Sequence[str], log: Path, timeout: float
) -> tuple[Zygote | None, str]:
    key = _key(python, boot, env, modules)
    shared_dir = env.get(SHARED_ENV, "").strip()
    with _lock:
        if key in _broken:
            return None, "the zygote did not start earlier in this process"
        if shared_dir and not _private_only:
            z = _shared.get(key)
            if z is None or not z.alive():
                z, why = connect_shared(Path(shared_dir), key, python, boot, env, modules, timeout)
                if z is None and why:
                    _broken.add(key)
                    return None, why
            if z is not None:
                _shared[key] = z
                return z, ""
        z = _zygotes.get(key)
        if z is not None and z.alive():
            _zygotes.move_to_end(key)
            started = _starting.pop(key, None)
            if started is not None and not _ready(z, key, started, timeout):
                del _zygotes[key]
                return None, f"the zygote did not start (log: {started})"
            return z, ""
        if z is not None:
            z.close()
            del _zygotes[key]
            _starting.pop(key, None)
        z = Zygote.start(python, boot, env, modules, log)
        if not _ready(z, key, log, timeout):
            return None, f"the zygote did not start (log: {log})"
        _keep(key, z)
        return z, ""


def _ready(z: Zygote, key: tuple[object, ...], log: Path, timeout: float) -> bool:
    """Wait for ``z`` to say ready; one that does not is killed, and ``key`` never tried again
    in this process (plain spawns from then on)."""
    if not z.wait_ready(timeout):
        _kill(z)
        _broken.add(key)
        return False
    with contextlib.suppress(OSError):
        if log.stat().st_size == 0:  # a start that said nothing
            log.unlink()
    return True


def _kill(z: Zygote) -> None:
    z.close()
    with contextlib.suppress(ProcessLookupError):
        os.kill(z.pid, signal.SIGKILL)


def _keep(key: tuple[object, ...], z: Zygote) -> None:
    _zygotes[key] = z
    while len(_zygotes) > MAX_ZYGOTES:
        old, gone = _zygotes.popitem(last=False)
        if old in _starting:
            _kill_starting(old, gone)
        else:
            gone.close()


def _kill_starting(key: tuple[object, ...], z: Zygote) -> None:
    """Let go of a zygote that prestart() started and nothing used: it forked nothing, and is
    killed rather than waited for (it would finish importing torch first)."""
    log = _starting.pop(key, None)
    _kill(z)
    if z.proc is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            z.proc.wait(timeout=5)
    with contextlib.suppress(OSError):
        if log is not None and log.stat().st_size == 0:  # it said nothing
            log.unlink()


def _key_env(env: Mapping[str, str], code_roots: Sequence[str]) -> dict[str, str] | None:
    """The zygote's environment for a worker with ``env``: without what differs between its
    workers, its import path without the code roots in front (None: ``PYTHONPATH`` does not
    start with them, and the worker is spawned plainly)."""
    base = {
        k: v
        for k, v in env.items()
        if k not in PER_WORKER_ENV and not k.startswith(PER_WORKER_PREFIXES)
    }
    pythonpath = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if pythonpath[: len(code_roots)] != list(code_roots):
        return None
    rest = pythonpath[len(code_roots) :]
    if rest:
        base["PYTHONPATH"] = os.pathsep.join(rest)
    return base


def prestart(
    *,
    python: str,
    boot: str,
    env: Mapping[str, str],
    code_roots: Sequence[str],
    modules: Sequence[str],
    log: Path,
) -> bool:
    """Start the private zygote that :func:`fork_worker` with these arguments would start, and
    do not wait for it: the caller does other work (loading its cases) while it imports torch,
    and the first :func:`fork_worker` that needs it waits for it then. Nothing is started when
    forking is off, where zygotes are shared (started on first use, and usually up already),
    or when that zygote is started already; False then."""
    if not enabled(env) or env.get(SHARED_ENV, "").strip():
        return False
    base = _key_env(env, code_roots)
    if base is None:
        return False
    key = _key(python, boot, base, modules)
    with _lock:
        if key in _broken or key in _zygotes:
            return False
        _keep(key, Zygote.start(python, boot, base, modules, log))
        _starting[key] = log
    return True


def fork_worker(
    *,
    python: str,
    boot: str,
    argv: Sequence[str],
    env: Mapping[str, str],
    code_roots: Sequence[str],
    cwd: str | None,
    modules: Sequence[str],
    log_fd: int,
    log_dir: Path,
    key_fd: int,
    timeout: float,
) -> tuple[ForkedProcess | None, str]:
    """A worker forked from the zygote for ``python`` and ``env`` (started on first use), as
    ``[python, -P, -c, boot, *argv]`` with ``env`` would have started it; or None and why not
    (the caller spawns it plainly)."""
    if not enabled(env):
        return None, f"{ENV_SWITCH} is off"
    base = _key_env(env, code_roots)
    if base is None:
        return None, "PYTHONPATH does not start with the code roots"
    t0 = time.monotonic()
    try:
        log = log_dir / f"zygote-{os.getpid()}-{len(_zygotes) + len(_broken)}.log"
        z, why = _zygote(python, boot, base, modules, log, timeout)
        if z is None:
            return None, why
    except OSError as exc:
        return None, f"the zygote did not start: {exc}"
    stdin_r, stdin_w = os.pipe()
    stdout_r, stdout_w = os.pipe()
    status_r, status_w = os.pipe()
    try:
        request: dict[str, object] = {
            "argv": list(argv),
            "env": dict(env),
            "code_roots": list(code_roots),
            # a spawn with no working folder given runs in the manager's current one
            "cwd": os.path.join(os.getcwd(), cwd or ""),
        }
        try:
            reply = z.fork(
                request,
                [stdin_r, stdout_w, log_fd, key_fd, status_w],
                max(1.0, timeout - (time.monotonic() - t0)),
            )
        finally:
            for fd in (stdin_r, stdout_w, status_w):
                os.close(fd)
    except (OSError, ValueError) as exc:  # a zygote that died or answered nonsense
        reply = {"refused": f"it failed: {exc}"}
    pid = reply.get("pid")
    if not isinstance(pid, int):
        for fd in (stdin_w, stdout_r, status_r):
            os.close(fd)
        return None, f"the zygote refused: {reply.get('refused')}"
    return ForkedProcess(pid, stdin_w, stdout_r, status_r, z.pid, z.shared), ""


def renew() -> None:
    """Workers started from now on come from new private zygotes, hence new processes all
    through: a comparison's fresh pair of workers per round must not inherit one memory layout
    (which the zygote's exec randomized once) round after round; see
    :mod:`harness.execution.paired`. Shared zygotes stay connected (their workers live on
    until their pools close them) but fork nothing more for this process."""
    global _private_only
    with _lock:
        _private_only = True
    _close(_zygotes)


def close_all() -> None:
    """Stop every zygote of this process (its workers live on until their pools close them)
    and leave the shared ones (which kill what they forked for this process)."""
    _close(_zygotes)
    _close(_shared)


def _close(zygotes: dict[tuple[object, ...], Zygote]) -> None:
    with _lock:
        for key in [k for k in zygotes if k in _starting]:
            _kill_starting(key, zygotes.pop(key))
        for z in zygotes.values():
            z.close()
        for z in zygotes.values():
            # it exits once its workers have, which the pools have killed by now
            with contextlib.suppress(subprocess.TimeoutExpired):
                if z.proc is not None:
                    z.proc.wait(timeout=5)
        zygotes.clear()


atexit.register(close_all)
