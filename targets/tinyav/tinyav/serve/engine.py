"""One rank's model: loaded once, sharded for tensor parallelism, run once per request.

Every rank holds an :class:`Engine`. Rank 0 calls :meth:`Engine.submit` for each HTTP
request, which first broadcasts the job so the other ranks (in :meth:`Engine.follow`) run the
same forward with it, collective for collective. Each rank records the request through
``probe.request`` (a per-request perf log when the harness names a folder, else nothing).
Only rank 0 exports the MP4 and WAV it answers with.
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tinyav._probe import probe
from tinyav.serve.distributed import RankInfo, backend_for, broadcast_job, init_group

# The fields of tinyav.pipeline.Request a job may carry (reference media are not served).
REQUEST_FIELDS = (
    "prompt",
    "negative_prompt",
    "num_frames",
    "height",
    "width",
    "fps",
    "steps",
    "guidance",
    "seed",
)


@dataclass(frozen=True)
class Generated:
    """What rank 0 answers a request with."""

    request_id: str
    mp4: bytes
    wav: bytes
    num_frames: int
    height: int
    width: int
    fps: int
    sample_rate: int
    num_samples: int
    elapsed_s: float


def _request_scope(request_id: str) -> Any:
    # A harness without ``probe.request`` (older than the perf log) records nothing.
    scope = getattr(probe, "request", None)
    return scope(request_id) if scope is not None else contextlib.nullcontext()


class Engine:
    """A loaded pipeline on one rank, and the control group that feeds it jobs."""

    def __init__(self, pipe: Any, info: RankInfo, control: Any) -> None:
        self.pipe = pipe
        self.info = info
        self.control = control

    @classmethod
    def load(cls, checkpoint: Path, platform: str, info: RankInfo) -> Engine:
        """Join the group (TP > 1), load ``checkpoint``, keep this rank's shard."""
        import torch

        from tinyav.loader import load_dit
        from tinyav.model import init_companions
        from tinyav.pipeline import Pipeline
        from tinyav.scenarios._common import device_for
        from tinyav.serve.tp import shard_dit

        device = device_for(platform)
        if device != "cpu" and info.world_size > 1:
            index = info.rank
            if device == "cuda":
                # a rank pinned to its own device (a harness multi-rank case) sees it as cuda:0
                index %= max(1, torch.cuda.device_count())
                torch.cuda.set_device(index)
            device = f"{device}:{index}"
        control = None
        if info.world_size > 1:
            control = init_group(info, backend_for(platform))
        dit = load_dit(checkpoint, device=device)
        shard_dit(dit, info.rank, info.world_size)
        pipe = Pipeline(dit, init_companions(dit.cfg), platform=platform, device=device)
        return cls(pipe, info, control)

    def validate(self, job: dict[str, Any]) -> None:
        """Raise ``ValueError`` for a request the pipeline would refuse (before any rank runs
        it, so a bad request never reaches a collective)."""
        self.pipe._validate(_request(job))

    def submit(self, job: dict[str, Any]) -> Generated:
        """Rank 0: hand ``job`` to every rank, run it here, answer with the media."""
        if self.info.world_size > 1:
            broadcast_job(job, self.control)
        out = self.run(job)
        assert out is not None
        return out

    def run(self, job: dict[str, Any]) -> Generated | None:
        """Run one job on this rank; rank 0 returns the encoded media, others None."""
        import numpy as np

        from tinyav import media
        from tinyav.model import SAMPLE_RATE

        req = _request(job)
        rid = str(job["request_id"])
        lead = self.info.rank == 0
        start = time.perf_counter()
        with _request_scope(rid), tempfile.TemporaryDirectory(prefix="tinyav-serve-") as tmp:
            probe.note("serve.tp", self.info.world_size)
            mp4 = Path(tmp) / "video.mp4"
            out = self.pipe(req, out_path=mp4 if lead else None)
            if not lead:
                return None
            wav = media.write_wav(Path(tmp) / "audio.wav", np.ascontiguousarray(out.pcm))
            frames = out.frames
            return Generated(
                request_id=rid,
                mp4=mp4.read_bytes(),
                wav=wav.read_bytes(),
                num_frames=int(frames.shape[0]),
                height=int(frames.shape[1]),
                width=int(frames.shape[2]),
                fps=req.fps,
                sample_rate=SAMPLE_RATE,
                num_samples=int(out.pcm.shape[0]),
                elapsed_s=time.perf_counter() - start,
            )

    def follow(self) -> None:
        """Ranks > 0: run every job rank 0 broadcasts until it says ``stop``."""
        while True:
            job = broadcast_job(None, self.control)
            if job.get("op") == "stop":
                return
            try:
                self.run(job)
            except Exception as e:  # the request fails on rank 0 too; keep serving
                print(f"tinyav.serve rank {self.info.rank}: request failed: {e}", file=sys.stderr)

    def stop(self) -> None:
        """Rank 0: tell the other ranks to exit, then leave the group."""
        if self.info.world_size > 1:
            broadcast_job({"op": "stop"}, self.control)
            import torch.distributed as dist

            dist.destroy_process_group()


def _request(job: dict[str, Any]) -> Any:
    from tinyav.pipeline import Request

    return Request(**{k: job["request"][k] for k in REQUEST_FIELDS if k in job["request"]})
