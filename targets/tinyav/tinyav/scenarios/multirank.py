"""Multi-rank scenarios: tinyav's tensor-parallel pipeline without a server, one process per
rank, as a harness multi-rank case (``ranks = 2``) runs it.

Every rank joins the ``torch.distributed`` group named by ``RANK``, ``WORLD_SIZE``,
``MASTER_ADDR`` and ``MASTER_PORT`` (gloo on the CPU, the platform's backend elsewhere:
:func:`tinyav.serve.distributed.backend_for`), writes the same deterministic checkpoint, keeps
its shard of it (attention heads and the MLP split by columns and rows, summed with a real
``all_reduce``: :mod:`tinyav.serve.tp`) and runs the same request. Every rank records its stages and
fingerprints (``denoise.step*``, ``video.frames``, ``audio.pcm``...), which the all-reduce
makes equal on every rank. The pipeline records the outputs (``video`` and ``audio``
arrays, the ``mp4``); the harness keeps rank 0's. Without the variables it runs at TP 1.
"""

from __future__ import annotations

from tinyav._probe import probe
from tinyav.scenarios._common import init_torch, workdir

DEFAULT_PROMPT = "a red fox"


def tp_t2va(
    *,
    quant: str = "int8",
    variant: str = "full",
    prompt: str = DEFAULT_PROMPT,
    seed: int = 5,
    steps: int = 2,
    num_frames: int = 8,
    height: int = 32,
    width: int = 32,
    fps: int = 8,
) -> None:
    """One text-to-video+audio request at the TP degree of the group (``WORLD_SIZE``); the
    request's ``seed`` is its own (as a server request's is), so TP 2 is judged against the
    TP 1 server's reference."""
    from tinyav.checkpoint import write_checkpoint
    from tinyav.loader import quantized_modules
    from tinyav.scenarios.pipeline import QUANT_FORMATS
    from tinyav.serve.distributed import RankInfo
    from tinyav.serve.engine import Engine

    init_torch()
    info = RankInfo.from_env()
    platform = probe.platform() or "cpu"
    probe.note("tp.world_size", info.world_size)
    with workdir(None) as tmp:
        ckpt = write_checkpoint(
            tmp / f"tinyav-{variant}-{quant}.safetensors",
            QUANT_FORMATS[quant],  # type: ignore[arg-type]
            variant=variant,  # type: ignore[arg-type]
        )
        engine = Engine.load(ckpt, platform, info)
        # what the loader built on this rank, counted on its (sharded) model
        probe.note("loader.quantized_layers", len(quantized_modules(engine.pipe.dit)))
        job = {
            "request_id": f"tp{info.world_size}-rank{info.rank}",
            "request": {
                "prompt": prompt,
                "seed": seed,
                "steps": steps,
                "num_frames": num_frames,
                "height": height,
                "width": width,
                "fps": fps,
            },
        }
        try:
            out = engine.run(job)
        finally:
            if info.world_size > 1:
                import torch.distributed as dist

                dist.destroy_process_group()
    if out is not None:  # rank 0: the pipeline recorded video, audio and mp4 already
        probe.note("tp.elapsed_s", out.elapsed_s)
