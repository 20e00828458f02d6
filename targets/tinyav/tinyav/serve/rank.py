"""Ranks 1..N-1 of a tensor-parallel ``tinyav.serve`` (started by rank 0, never by hand).

A rank joins the group named by ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and
``MASTER_PORT``, loads its shard of the checkpoint rank 0 wrote, and runs every request rank 0
broadcasts until rank 0 says stop. It ignores SIGINT and SIGTERM (a terminal's Ctrl-C or a
process-group SIGTERM reaches every rank; rank 0 decides when the others stop, after the
request in flight), and on Linux it dies with its parent, so it is never left behind.
SIGUSR1 writes every thread's stack to stderr (faulthandler), as rank 0 does.
"""

from __future__ import annotations

import argparse
import faulthandler
import signal
import sys
from pathlib import Path


def _die_with_parent() -> None:
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    pr_set_pdeathsig = 1
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(pr_set_pdeathsig, signal.SIGKILL)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tinyav.serve.rank")
    p.add_argument("--checkpoint", required=True, help="the checkpoint rank 0 wrote")
    p.add_argument("--platform", default="cpu")
    args = p.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # every thread's stack to stderr on SIGUSR1: a harness without py-spy can still see a hang
    if hasattr(signal, "SIGUSR1"):  # not on Windows
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    _die_with_parent()
    from tinyav.scenarios._common import init_torch
    from tinyav.serve.distributed import RankInfo
    from tinyav.serve.engine import Engine

    init_torch()
    engine = Engine.load(Path(args.checkpoint), args.platform, RankInfo.from_env())
    engine.follow()
    import torch.distributed as dist

    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
