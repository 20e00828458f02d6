"""The process group of a tensor-parallel server: backend per platform, rendezvous, job fan-out.

Rank 0 serves HTTP and hands every request to the other ranks through :func:`broadcast_job`,
a JSON document sent as bytes (no pickle), on a gloo "control" group whose wait has no
practical deadline: an idle server's ranks wait there between requests. The model's own
collectives run on the default group, whose backend follows the platform
(:func:`backend_for`) and whose timeout (:data:`COLLECTIVE_TIMEOUT`) bounds a hung
``all_reduce``.
"""

from __future__ import annotations

import datetime
import json
import os
import socket
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

# The collective backend of each platform (torch.distributed's names).
BACKENDS = {"cpu": "gloo", "cuda": "nccl", "hip": "nccl", "npu": "hccl", "xpu": "xccl"}
COLLECTIVE_TIMEOUT = datetime.timedelta(seconds=600)
IDLE_TIMEOUT = datetime.timedelta(days=365)


def backend_for(platform: str) -> str:
    """The ``torch.distributed`` backend for ``platform``: gloo on the CPU, nccl on CUDA and
    HIP (RCCL answers to that name), hccl on Ascend NPUs, xccl on Intel XPUs."""
    try:
        return BACKENDS[platform]
    except KeyError:
        raise ValueError(
            f"no torch.distributed backend for platform {platform!r}; known: {sorted(BACKENDS)}"
        ) from None


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class RankInfo:
    """Where this process sits in the group (from the standard torch.distributed variables)."""

    rank: int
    world_size: int
    master_addr: str
    master_port: int

    @classmethod
    def from_env(cls) -> RankInfo:
        return cls(
            int(os.environ.get("RANK", "0")),
            int(os.environ.get("WORLD_SIZE", "1")),
            os.environ.get("MASTER_ADDR", "127.0.0.1"),
            int(os.environ.get("MASTER_PORT", "0")),
        )

    def env(self) -> dict[str, str]:
        return {
            "RANK": str(self.rank),
            "LOCAL_RANK": str(self.rank),
            "WORLD_SIZE": str(self.world_size),
            "MASTER_ADDR": self.master_addr,
            "MASTER_PORT": str(self.master_port),
        }


def init_group(info: RankInfo, backend: str) -> Any:
    """Join the default group; returns the control group used by :func:`broadcast_job`."""
    dist.init_process_group(
        backend,
        init_method=f"tcp://{info.master_addr}:{info.master_port}",
        rank=info.rank,
        world_size=info.world_size,
        timeout=COLLECTIVE_TIMEOUT,
    )
    return dist.new_group(backend="gloo", timeout=IDLE_TIMEOUT)


def broadcast_job(job: dict[str, Any] | None, control: Any) -> dict[str, Any]:
    """Rank 0's ``job`` on every rank (the others pass None): length, then UTF-8 JSON bytes."""
    if dist.get_rank() == 0:
        assert job is not None
        data = json.dumps(job).encode("utf-8")
        size = torch.tensor([len(data)], dtype=torch.int64)
    else:
        size = torch.zeros(1, dtype=torch.int64)
    dist.broadcast(size, src=0, group=control)
    if dist.get_rank() == 0:
        buf = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    else:
        buf = torch.empty(int(size.item()), dtype=torch.uint8)
    dist.broadcast(buf, src=0, group=control)
    return dict(json.loads(buf.numpy().tobytes().decode("utf-8")))
