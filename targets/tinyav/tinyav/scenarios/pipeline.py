"""Pipeline scenarios: text-to-video+audio (``t2va``) and reference-conditioned (``ref2va``).

Both take one frozen :class:`GenerationParams` record. Case files call them with keywords
(``target(**params)``); the keywords are exactly the record's fields, and the signature the
harness binds against is the record's. Each writes a fresh checkpoint, loads it, generates,
exports an MP4 and checks the decoded result; what the code decided and executed is noted
(``checkpoint.format``, ``loader.quantized_layers``, ``pipeline.mode``, ``device.ran``,
``dispatch.<op>.plan`` and ``dispatch.<op>.ran``), never an echo of the params. Under the
harness the plan and the FP8 flavour follow the attempt's platform identity
(``probe.platform_info()``), simulated or real; what executes follows the device in hand.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tinyav._probe import probe
from tinyav.scenarios._common import device_for, init_torch, resolve_seed, workdir

# The ``quant`` param -> checkpoint format written (tinyav.checkpoint.FORMATS).
QUANT_FORMATS = {"bf16": "bf16", "int8": "int8_convrot", "fp8": "fp8"}
VARIANTS = ("full", "pruned")
DEFAULT_PROMPT = "a red fox trots through snowy pines at dusk, wind and footsteps"


@dataclass(frozen=True, kw_only=True)
class GenerationParams:
    """Everything one generation scenario is parameterized by (all case-file keywords)."""

    quant: str = "bf16"
    variant: str = "full"
    steps: int = 4
    prompt: str = DEFAULT_PROMPT
    num_frames: int = 16
    height: int = 64
    width: int = 64
    fps: int = 8
    guidance: float = 3.0
    seed: int | None = 0
    platform: str | None = None
    fp8_platform: str | None = None
    offload: bool = False
    workdir: str | None = None

    def __post_init__(self) -> None:
        if self.quant not in QUANT_FORMATS:
            raise ValueError(f"quant must be one of {sorted(QUANT_FORMATS)}, got {self.quant!r}")
        if self.variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}, got {self.variant!r}")


Scenario = Callable[..., None]


def _keyword_scenario(fn: Callable[[GenerationParams], None]) -> Scenario:
    """``fn(params)`` exposed as ``fn(**fields)`` with the record's fields as its signature."""

    @functools.wraps(fn)
    def call(**kwargs: Any) -> None:
        fn(GenerationParams(**kwargs))

    fields = [
        inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default)
        for f in dataclasses.fields(GenerationParams)
    ]
    call.__signature__ = inspect.Signature(fields, return_annotation=None)  # type: ignore[attr-defined]
    return call


def generate(params: GenerationParams, *, reference: bool) -> dict[str, Any]:
    """One generation from a freshly written checkpoint; ``reference`` adds reference media.

    Returns the decoded ``frames`` and ``pcm``; raises ``AssertionError`` when the outputs are
    malformed (wrong shape, constant video, silent or non-finite audio, unreadable MP4).
    """
    init_torch()
    import numpy as np
    import torch

    from tinyav import dispatch, media
    from tinyav.checkpoint import write_checkpoint
    from tinyav.fp8 import fp8_dtype_for, fp8_dtype_named
    from tinyav.loader import quantized_modules
    from tinyav.pipeline import Pipeline, Request

    p = params
    s = resolve_seed(p.seed)
    asked = p.platform or probe.platform() or "cpu"
    device = device_for(asked)
    probe.note("device.asked", asked)
    run_platform = dispatch.tensor_platform(torch.empty(0, device=device))
    # Decisions follow the harness's identity of the platform (a simulated one included):
    # its capabilities pick the kernel paths, its FP8 flavour the float8 dtype. Standalone,
    # they follow the device in hand.
    info = dispatch.identity_for(asked)
    plan_platform = asked if info is not None else run_platform
    capabilities = tuple(info.get("capabilities", ())) if info is not None else None
    if p.fp8_platform is not None:  # an explicit flavour request (MI300 numerics on a CPU)
        fp8_dtype = fp8_dtype_for(p.fp8_platform)
    else:
        fp8_dtype = fp8_dtype_named(info.get("fp8")) if info is not None else None
    if info is not None:
        probe.note("platform.arch", str(info.get("arch") or ""))
        probe.note("platform.simulated", bool(info.get("simulated")))
    with workdir(p.workdir) as wd:
        with probe.stage("CheckpointWrite"):
            ckpt = write_checkpoint(
                wd / f"tinyav-{p.variant}-{p.quant}.safetensors",
                QUANT_FORMATS[p.quant],  # type: ignore[arg-type]
                variant=p.variant,  # type: ignore[arg-type]
            )
        probe.record_input("checkpoint", ckpt)
        ref_video = ref_audio = None
        if reference:
            # The reference clip is synthesized from the seed, then round-tripped through
            # real MP4/WAV files so decoding is part of the case.
            frames, pcm = media.synthetic_reference(s, p.num_frames, p.height, p.width, p.fps)
            ref_video = str(media.write_mp4(wd / "reference.mp4", frames, None, fps=p.fps))
            ref_audio = str(media.write_wav(wd / "reference.wav", pcm))
        with probe.stage("LoadStage"):
            pipe = Pipeline.from_checkpoint(
                ckpt,
                platform=plan_platform,
                device=device,
                offload=p.offload,
                fp8_platform=p.fp8_platform,
                capabilities=capabilities,
                fp8_dtype=fp8_dtype,
                execute_on=run_platform if run_platform != plan_platform else None,
            )
        # What the loader built, counted on the loaded model (not on the file or the params).
        probe.note("loader.quantized_layers", len(quantized_modules(pipe.dit)))
        flavours = {
            str(m.flavour).removeprefix("torch.")
            for m in pipe.dit.modules()
            if hasattr(m, "flavour")
        }
        if flavours:
            probe.note("fp8.flavour", ",".join(sorted(flavours)))
        req = Request(
            p.prompt,
            num_frames=p.num_frames,
            height=p.height,
            width=p.width,
            fps=p.fps,
            steps=p.steps,
            guidance=p.guidance,
            seed=s,
            reference_video=ref_video,
            reference_audio=ref_audio,
        )
        out = pipe(req, out_path=wd / "out" / "tinyav.mp4")
        assert out.frames.shape == (p.num_frames, p.height, p.width, 3), out.frames.shape
        assert out.frames.dtype == np.uint8
        n_samples = round(p.num_frames / p.fps * 16_000)
        assert out.pcm.shape == (n_samples,), out.pcm.shape
        assert np.isfinite(out.pcm).all(), "non-finite audio samples"
        assert float(out.frames.std()) > 1.0, "video is constant"
        assert float(np.abs(out.pcm).max()) > 1e-3, "audio is silent"
        assert out.mp4 is not None and out.mp4.is_file()
        decoded = media.decode_video(out.mp4)
        assert decoded.shape[0] == p.num_frames, (
            f"MP4 has {decoded.shape[0]} frames, want {p.num_frames}"
        )
        assert media.decode_audio(out.mp4).size > 0, "MP4 has no audio"
        return {"frames": out.frames, "pcm": out.pcm}


@_keyword_scenario
def t2va(params: GenerationParams) -> None:
    """Text-to-video+audio from a freshly written ``quant`` checkpoint (bf16 | int8 | fp8)."""
    generate(params, reference=False)


@_keyword_scenario
def ref2va(params: GenerationParams) -> None:
    """Reference-conditioned video+audio: synthesizes reference MP4/WAV, decodes, conditions."""
    generate(params, reference=True)
