"""How a worker process comes to be: forked from the zygote of its interpreter and environment
(:mod:`harness.execution.zygote`), or spawned as ``python -P -c <boot>``; either way with the
side's code roots first on its import path and a line in its log that says which."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

from harness.execution import zygote
from harness.execution.zygote import ForkedProcess, fork_worker

__all__ = ["import_env", "prestart_zygote", "start_worker", "worker_argv"]


def import_env(code_roots: Sequence[str], environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` with ``code_roots`` first on ``PYTHONPATH``, ahead of what it held."""
    env = dict(environ)
    paths = [*code_roots, env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(x for x in paths if x)
    return env


def _harness_root() -> str | None:
    """The folder this harness was imported from, when it is a source tree rather than an
    installed environment's site folder (which must never leak into another interpreter)."""
    root = Path(__file__).resolve().parents[2]
    return None if root.name in ("site-packages", "dist-packages") else str(root)


def _boot(module: str, call: str) -> str:
    """``-c`` code that runs ``harness.worker.<module>``'s ``main`` as ``call`` says, with the
    harness's own source folder (when it runs from one) last on the import path."""
    root = _harness_root()
    boot = "import sys\n"
    if root is not None:
        boot += f"sys.path.append({root!r})\n"
    return boot + f"from harness.worker.{module} import main\nsys.exit({call})\n"


def _zygote_boot() -> str:
    """The zygote's ``-c`` code: one boot for :func:`start_worker` and :func:`prestart_zygote`,
    as it is part of what names a zygote (a zygote started early is used only if it matches)."""
    return _boot("zygote", "main(sys.argv[1:])")


def worker_argv(python: str) -> list[str]:
    """How ``python`` starts the worker so that the code under test comes only from the import
    path it is given (code provenance, DESIGN.md): ``-P`` keeps the working folder (the working
    tree, in a comparison run from it) off ``sys.path``, where ``python -m`` would put it first,
    so ``PYTHONPATH`` (the side's code roots first) leads, then the interpreter's own
    environment. The harness's own source folder, when it runs from one, comes last, so that
    the harness imports in the worker without shadowing anything."""
    return [python, "-P", "-c", _boot("main", "main()")]


def start_worker(
    *,
    python: str,
    args: Sequence[str],
    env: Mapping[str, str],
    cwd: str | None,
    code_roots: Sequence[str],
    preimport: Sequence[str],
    fresh: bool,
    log: IO[bytes],
    log_dir: Path,
    key_fd: int,
    timeout: float,
) -> subprocess.Popen[bytes] | ForkedProcess:
    """The worker ``[*worker_argv(python), *args]`` with ``env``: forked from the zygote that
    imported ``preimport`` when it can be, else spawned (``fresh``: always, a bare interpreter);
    its stderr is ``log``, its reply key the pipe ``key_fd``, its own process group."""
    forked, why = (None, "a fresh interpreter")
    if not fresh:
        forked, why = fork_worker(
            python=python,
            boot=_zygote_boot(),
            argv=args,
            env=env,
            code_roots=code_roots,
            cwd=cwd,
            modules=preimport,
            log_fd=log.fileno(),
            log_dir=log_dir,
            key_fd=key_fd,
            timeout=timeout,
        )
    if forked is not None:
        which = "shared zygote" if forked.shared else "zygote"
        log.write(f"[harness] worker {forked.pid} forked from {which} {forked.zygote}\n".encode())
        log.flush()
        return forked
    log.write(f"[harness] spawned, not forked: {why}\n".encode())
    log.flush()
    return subprocess.Popen(
        [*worker_argv(python), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=log,
        env=dict(env),
        cwd=cwd,
        pass_fds=(key_fd,),
        start_new_session=True,  # its own process group: killable as a whole, no Ctrl-C
    )


def prestart_zygote(
    *,
    python: str,
    env: Mapping[str, str],
    code_roots: Sequence[str],
    preimport: Sequence[str],
    log: Path,
) -> bool:
    """Start, without waiting for it, the zygote that :func:`start_worker` with these arguments
    (not fresh) will fork its worker from (:func:`harness.execution.zygote.prestart`)."""
    return zygote.prestart(
        python=python,
        boot=_zygote_boot(),
        env=env,
        code_roots=code_roots,
        modules=preimport,
        log=log,
    )
