"""A toy multi-rank target for the end-to-end tests, without torch (whose import alone takes
seconds a rank on the CI runner): a sum over the ranks through a real TCP rendezvous at
``MASTER_ADDR:MASTER_PORT``, as gloo's would be. Rank 0 listens; every other rank connects,
sends its value and receives the sum. ``skip_on = R`` makes rank R skip the collective and
wait elsewhere, so rank 0 waits in :func:`all_reduce` (the fault of issue 19); ``fail_on = R``
makes rank R fail an assertion before it, so rank 0 loses its peer there; ``leave_child``
makes rank 0 leave a process behind. The real gloo
path is the bundled ``cases/multirank`` (tinyav at TP 2)."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import time

import numpy as np

from harness import probe


def _recv(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise ConnectionError("peer closed the connection")
        data += chunk
    return data


class Group:
    """The ranks' rendezvous: rank 0 accepts one connection from every other rank."""

    def __init__(self) -> None:
        self.rank = int(os.environ["RANK"])
        self.world = int(os.environ["WORLD_SIZE"])
        addr = (os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
        self.peers: list[socket.socket] = []
        if self.rank == 0:
            server = socket.create_server(addr)
            self.peers = [server.accept()[0] for _ in range(self.world - 1)]
            server.close()
        else:
            for _ in range(500):
                try:
                    self.peers = [socket.create_connection(addr)]
                    break
                except OSError:
                    time.sleep(0.01)

    def all_reduce(self, value: float) -> float:
        """The sum of every rank's ``value``, on every rank."""
        if self.rank == 0:
            total = value + sum(struct.unpack("d", _recv(p, 8))[0] for p in self.peers)
            for p in self.peers:
                p.sendall(struct.pack("d", total))
            return total
        self.peers[0].sendall(struct.pack("d", value))
        return float(struct.unpack("d", _recv(self.peers[0], 8))[0])


def wait_elsewhere() -> None:
    """Where the skipping rank is stuck (its stack names this function)."""
    while True:
        time.sleep(0.05)


def allreduce(
    skip_on: int = -1, fail_on: int = -1, work_s: float = 0.2, leave_child: bool = False
) -> None:
    with probe.stage("init"):
        group = Group()
    assert group.rank != fail_on, f"rank {group.rank} refuses to sum"
    x = np.full((4,), float(group.rank + 1), dtype=np.float32)
    probe.fingerprint("shard", x)
    with probe.stage("work"):
        if group.rank == group.world - 1:
            time.sleep(work_s)  # the last rank is the slowest in this stage
    with probe.stage("allreduce"):
        if group.rank == skip_on:
            wait_elsewhere()
        total = group.all_reduce(float(x[0]))
    summed = np.full((4,), total, dtype=np.float32)
    probe.fingerprint("summed", summed)
    probe.fingerprint("rank", np.array([group.rank], dtype=np.int64))
    if group.rank == 0:
        probe.output("summed", summed)
        if leave_child:  # a helper process this rank never stops
            subprocess.Popen(["sleep", "30"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
