"""One rank of the tensor-parallel equivalence check; the test starts two (RANK 0 and 1).

Every rank builds the same seeded layers and checkpoints, computes the unsharded result and
its own shard's, and all-reduces through the real gloo group. Rank 0 writes the largest
differences it measured to the JSON file named on the command line:

- ``linear``: a plain MLP, ``fc1`` column- and ``fc2`` row-parallel (with biases);
- ``dit.<fmt>``: one DiT forward (video and audio velocities) for bf16, int8 and fp8 files;
- ``pipeline.<fmt>``: a 2-step generation of the bf16 file (latents after denoising, decoded
  frames, PCM).
"""

from __future__ import annotations

import copy
import json
import math
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from tinyav.checkpoint import write_checkpoint
from tinyav.loader import load_dit
from tinyav.model import TinyDiT, init_companions
from tinyav.pipeline import Pipeline, Request
from tinyav.serve.distributed import RankInfo
from tinyav.serve.tp import column_shard, row_shard, shard_dit
from torch import nn


def _max(a: torch.Tensor | np.ndarray, b: torch.Tensor | np.ndarray) -> float:
    a_, b_ = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.abs(a_ - b_).max())


def _psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return math.inf if mse == 0 else 10 * math.log10(255.0**2 / mse)


def linear_case(rank: int, world: int) -> float:
    torch.manual_seed(0)
    fc1, fc2 = nn.Linear(64, 256), nn.Linear(256, 64)
    x = torch.randn(3, 5, 64)
    with torch.no_grad():
        ref = fc2(F.gelu(fc1(x)))
        lo, hi = rank * 256 // world, (rank + 1) * 256 // world
        col = column_shard(fc1, torch.arange(lo, hi))
        row = row_shard(fc2, lo, hi, None)
        got = row(F.gelu(col(x)))
    return _max(got, ref)


def dit_case(full: TinyDiT, sharded: TinyDiT) -> float:
    gen = torch.Generator().manual_seed(1)
    video = torch.randn(2, 8, 2, 4, 4, generator=gen)
    audio = torch.randn(2, 16, 25, generator=gen)
    ctx = torch.randn(2, 16, 128, generator=gen)
    sigma = torch.tensor([0.7, 0.7])
    with torch.no_grad():
        ref = full(video, audio, sigma, ctx)
        got = sharded(video, audio, sigma, ctx)
    return max(_max(got[0], ref[0]), _max(got[1], ref[1]))


def pipeline_case(full: TinyDiT, sharded: TinyDiT) -> dict[str, float]:
    req = Request("a red fox", num_frames=8, height=32, width=32, steps=2, seed=3)
    outs: list[dict[str, Any]] = []
    for dit in (full, sharded):
        pipe = Pipeline(dit, init_companions(dit.cfg))
        context = pipe._encode_text(req)
        video, audio = pipe._noise(req)
        video, audio = pipe._denoise(req, video, audio, context, None)
        with torch.no_grad():
            frames = pipe.companions.video_decoder(video)[0].numpy()
            pcm = pipe.companions.audio_decoder(audio)[0].numpy()
        outs.append({"video": video, "audio": audio, "frames": frames, "pcm": pcm})
    ref, got = outs
    return {
        "latents": max(_max(got["video"], ref["video"]), _max(got["audio"], ref["audio"])),
        "frames": _max(got["frames"], ref["frames"]),
        "frames_psnr": _psnr(got["frames"], ref["frames"]),
        "pcm": _max(got["pcm"], ref["pcm"]),
    }


def main(out: Path) -> None:
    torch.set_num_threads(1)
    info = RankInfo.from_env()
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://{info.master_addr}:{info.master_port}",
        rank=info.rank,
        world_size=info.world_size,
    )
    rank, world = info.rank, info.world_size
    results: dict[str, Any] = {"linear": linear_case(rank, world)}
    with tempfile.TemporaryDirectory(prefix=f"tp-rank{rank}-") as tmp:
        for fmt in ("bf16", "int8_convrot", "fp8"):
            ckpt = write_checkpoint(Path(tmp) / f"{fmt}.safetensors", fmt)  # type: ignore[arg-type]
            full = load_dit(ckpt)
            sharded = shard_dit(copy.deepcopy(full), rank, world)
            results[f"dit.{fmt}"] = dit_case(full, sharded)
            if fmt == "bf16":  # the quantized shards are covered by their forward above
                results[f"pipeline.{fmt}"] = pipeline_case(full, sharded)
    dist.destroy_process_group()
    if rank == 0:
        out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
