"""``python -m tinyav.serve``: start the server (rank 0) and, for ``--tp N``, ranks 1..N-1.

Order of start-up: uvicorn starts listening at once (``/health`` answers 503), while the engine
thread writes a fresh checkpoint (as the scenarios do) and loads it; the other ranks are
started as soon as the checkpoint exists and join rank 0 in a ``torch.distributed`` group.
When rank 0's weights are loaded ``/health`` answers 200 and one line is logged::

    tinyav.serve ready on http://127.0.0.1:8000 (tp=2)

SIGTERM or SIGINT shuts down gracefully: uvicorn finishes the requests in flight, rank 0
tells the other ranks to stop, waits for them (killing any that do not exit) and exits 0. A
second signal exits at once. SIGUSR1 writes every thread's stack to stderr (faulthandler). A
rank that dies, a port that cannot be bound or a load that fails ends the server with exit
code 1 and a line saying why.
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import signal
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import Future
from pathlib import Path
from types import FrameType
from typing import Any

from tinyav.serve.app import ServerState, build_app
from tinyav.serve.distributed import RankInfo, free_port
from tinyav.serve.engine import Engine

QUANTS = ("bf16", "int8", "fp8")
STOP_WAIT_S = 60.0
RANK_EXIT_WAIT_S = 10.0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m tinyav.serve",
        description="Serve tinyav text-to-video+audio over HTTP (FastAPI on uvicorn).",
        epilog="example: python -m tinyav.serve --port 8000 --tp 2 --quant int8",
    )
    p.add_argument("--port", type=int, required=True, help="TCP port to listen on")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel ranks (default 1)")
    p.add_argument("--quant", choices=QUANTS, default="bf16", help="checkpoint format")
    p.add_argument("--variant", choices=("full", "pruned"), default="full", help="DiT variant")
    p.add_argument("--platform", default="cpu", help="platform to run on (default cpu)")
    args = p.parse_args(argv)
    from tinyav.model import DiTConfig
    from tinyav.serve.tp import check_divisible

    try:
        check_divisible(DiTConfig(variant=args.variant), args.tp)
    except ValueError as e:
        p.error(str(e))
    return args


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _write_checkpoint(args: argparse.Namespace, folder: Path) -> Path:
    from tinyav.checkpoint import write_checkpoint
    from tinyav.scenarios.pipeline import QUANT_FORMATS

    name = f"tinyav-{args.variant}-{args.quant}.safetensors"
    fmt = QUANT_FORMATS[args.quant]
    return write_checkpoint(folder / name, fmt, variant=args.variant)  # type: ignore[arg-type]


def _spawn_rank(rank: int, info: RankInfo, ckpt: Path, platform: str) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        **RankInfo(rank, info.world_size, info.master_addr, info.master_port).env(),
    }
    cmd = [sys.executable, "-m", "tinyav.serve.rank", "--checkpoint", str(ckpt)]
    return subprocess.Popen([*cmd, "--platform", platform], env=env)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # every thread's stack to stderr on SIGUSR1: a harness without py-spy can still see a hang
    if hasattr(signal, "SIGUSR1"):  # not on Windows
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    from tinyav.scenarios._common import init_torch

    init_torch()
    import uvicorn

    info = RankInfo(0, args.tp, "127.0.0.1", free_port() if args.tp > 1 else 0)
    if args.tp > 1:
        os.environ.update(info.env())  # rank 0's perf log and torch see the same group
    state = ServerState(args.tp)
    config = uvicorn.Config(build_app(state), host=args.host, port=args.port, log_level="info")
    server = uvicorn.Server(config)
    workdir = tempfile.TemporaryDirectory(prefix="tinyav-serve-")
    ranks: list[subprocess.Popen[bytes]] = []
    signals: list[int] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        signals.append(signum)
        server.should_exit = True
        if len(signals) > 1:  # a second signal: no more waiting
            for proc in ranks:
                proc.kill()
            os._exit(128 + signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    http = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    http.start()
    ckpt = state.executor.submit(_write_checkpoint, args, Path(workdir.name))
    loading = state.executor.submit(_load, ckpt, args.platform, info, state)
    code = _watch(args, info, server, http, ckpt, loading, ranks, signals)
    return _shutdown(state, loading, args.tp, bool(server.started), ranks, workdir, code)


def _load(ckpt: Future[Path], platform: str, info: RankInfo, state: ServerState) -> None:
    try:
        state.engine = Engine.load(ckpt.result(), platform, info)
    except BaseException as e:
        state.error = f"{type(e).__name__}: {e}"
        raise


def _watch(
    args: argparse.Namespace,
    info: RankInfo,
    server: Any,
    http: threading.Thread,
    ckpt: Future[Path],
    loading: Future[None],
    ranks: list[subprocess.Popen[bytes]],
    signals: list[int],
) -> int:
    """Wait until the server stops; start the ranks, announce readiness, notice failures."""
    announced = False
    while http.is_alive():
        http.join(0.02)
        if ckpt.done() and not ranks and info.world_size > 1 and ckpt.exception() is None:
            ranks.extend(
                _spawn_rank(r, info, ckpt.result(), args.platform)
                for r in range(1, info.world_size)
            )
        if loading.done() and loading.exception() is not None and not signals:
            _log(f"tinyav.serve: loading the model failed: {loading.exception()}")
            server.should_exit = True
            return 1
        if not announced and loading.done() and server.started:
            _log(f"tinyav.serve ready on http://{args.host}:{args.port} (tp={args.tp})")
            announced = True
        for r, proc in enumerate(ranks, start=1):
            if proc.poll() is not None and not signals:
                _log(f"tinyav.serve: rank {r} exited with code {proc.returncode}; stopping")
                server.should_exit = True
                return 1
    if not server.started and not signals:
        _log(f"tinyav.serve: could not serve on {args.host}:{args.port} (see the error above)")
        return 1
    return 0


def _shutdown(
    state: ServerState,
    loading: Future[None],
    world_size: int,
    served: bool,
    ranks: list[subprocess.Popen[bytes]],
    workdir: tempfile.TemporaryDirectory[str],
    code: int,
) -> int:
    """Stop the other ranks through the engine (after any request in flight), reap them."""
    # A load in progress finishes first, unless it waits for ranks that were never started
    # or the server never listened (a port taken): then nothing is worth the wait.
    stuck = not loading.done() and (not served or (world_size > 1 and not ranks))
    if not stuck:
        try:
            loading.exception(timeout=STOP_WAIT_S)
        except TimeoutError:
            stuck = True
    if state.engine is not None and all(p.poll() is None for p in ranks):
        try:
            state.executor.submit(state.engine.stop).result(timeout=STOP_WAIT_S)
        except Exception as e:
            _log(f"tinyav.serve: stopping the ranks failed ({type(e).__name__}: {e})")
            stuck = True
    for r, proc in enumerate(ranks, start=1):
        try:
            proc.wait(timeout=RANK_EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            _log(f"tinyav.serve: rank {r} did not exit within {RANK_EXIT_WAIT_S:g} s; killed")
            proc.kill()
            proc.wait()
    workdir.cleanup()
    if stuck:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code or 1)  # the engine thread is stuck in a collective: do not join it
    state.executor.shutdown(wait=True)
    return code
