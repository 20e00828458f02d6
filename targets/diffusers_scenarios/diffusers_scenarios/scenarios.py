"""Pipeline scenarios: the functions case files name as ``target``.

Each builds its tiny pipeline from configs (``PipelineBuildStage``), draws the initial noise
from the case seed and passes it in through the pipeline's ``latents`` (and ``audio_latents``)
arguments, so the inputs are recorded facts (``latents.video.init``, ``latents.audio.init``);
runs one call under :class:`~diffusers_scenarios.instrument.Instrument`; and hands the frames,
the audio and an MP4 (``harness.media.write_mp4``) to the probe. Torch runs on a fixed number
of intra-op threads (``HARNESS_THREADS``, which the runner profile sets, else 1): Wan's VAE
differs by one float32 rounding step between 1 and 2 threads.

Example (a case file)::

    target = "diffusers_scenarios.scenarios:wan_t2v"
    params = { steps = 2, num_frames = 9, shift = 3.0 }
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch

from diffusers_scenarios.components import build_ltx2, build_wan, component_seed
from diffusers_scenarios.instrument import (
    LTX2_EXTRA_OUTPUTS,
    LTX2_STAGES,
    WAN_STAGES,
    Instrument,
)
from harness import probe
from harness.media import write_mp4


def init_torch() -> int:
    """Pin torch's intra-op threads; returns the count."""
    n = int(os.environ.get("HARNESS_THREADS") or 1)
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    return n


def _seed(seed: int | None) -> int:
    s = probe.seed()
    return int(s) if s is not None else int(seed or 0)


def _noise(seed: int, name: str, shape: tuple[int, ...]) -> torch.Tensor:
    gen = torch.Generator("cpu").manual_seed(component_seed(seed, name))
    noise = torch.randn(shape, generator=gen, dtype=torch.float32)
    probe.record_input(name, noise)
    probe.fingerprint(name, noise)
    return noise


def _frames_u8(frames: Any) -> np.ndarray:
    """``output_type="np"`` frames ``[1, T, H, W, 3]`` in [0, 1] -> uint8 ``[T, H, W, 3]``."""
    arr = np.asarray(frames, dtype=np.float32)[0]
    return np.round(np.clip(arr, 0.0, 1.0) * 255.0).astype(np.uint8)


def _notes(pipe: Any) -> None:
    import diffusers
    import transformers

    probe.note("pipeline.class", type(pipe).__name__)
    probe.note("diffusers.version", diffusers.__version__)
    probe.note("transformers.version", transformers.__version__)
    # What the scheduler decided, not an echo of the params: the sigmas it really stepped.
    sigmas = getattr(pipe.scheduler, "sigmas", None)
    if isinstance(sigmas, torch.Tensor):
        probe.note("scheduler.sigmas", ",".join(f"{s:.6f}" for s in sigmas.tolist()))


def _export(frames: np.ndarray, pcm: np.ndarray | None, fps: int, sample_rate: int) -> None:
    # Written straight into the run (a temporary folder outside an attempt); NaN/Inf counted in
    # the arrays it was encoded from.
    sources = ("video",) if pcm is None else ("video", "audio")
    with (
        probe.output_file("mp4", ".mp4", kind="file", encoded_from=sources) as path,
        probe.stage("ExportStage"),
    ):
        write_mp4(path, frames, pcm, fps=fps, sample_rate=sample_rate)


def ltx2_inputs(
    pipe: Any,
    seed: int,
    *,
    prompt: str,
    negative_prompt: str,
    height: int,
    width: int,
    num_frames: int,
    frame_rate: int,
    steps: int,
    guidance_scale: float,
) -> dict[str, Any]:
    """The keyword arguments of one ``LTX2Pipeline`` call, the initial video and audio noise
    drawn from ``seed`` (recorded inputs inside an attempt; bench/ calls it outside one)."""
    t_ratio, s_ratio = pipe.vae_temporal_compression_ratio, pipe.vae_spatial_compression_ratio
    video_shape = (
        1,
        pipe.transformer.config.in_channels,
        (num_frames - 1) // t_ratio + 1,
        height // s_ratio,
        width // s_ratio,
    )
    # The pipeline's own audio length rule for a clip of num_frames / frame_rate seconds.
    per_second = (
        pipe.audio_sampling_rate / pipe.audio_hop_length / pipe.audio_vae_temporal_compression_ratio
    )
    audio_shape = (
        1,
        pipe.audio_vae.config.latent_channels,
        round(num_frames / frame_rate * per_second),
        pipe.audio_vae.config.mel_bins // pipe.audio_vae_mel_compression_ratio,
    )
    return ltx2_kwargs(
        prompt=prompt,
        negative_prompt=negative_prompt,
        height=height,
        width=width,
        num_frames=num_frames,
        frame_rate=frame_rate,
        steps=steps,
        guidance_scale=guidance_scale,
        latents=_noise(seed, "latents.video.init", video_shape),
        audio_latents=_noise(seed, "latents.audio.init", audio_shape),
    )


def ltx2_kwargs(
    *,
    prompt: str,
    negative_prompt: str,
    height: int,
    width: int,
    num_frames: int,
    frame_rate: int,
    steps: int,
    guidance_scale: float,
    latents: torch.Tensor,
    audio_latents: torch.Tensor,
) -> dict[str, Any]:
    """The keyword arguments of one ``LTX2Pipeline`` call, given its initial noise."""
    return {
        "prompt": prompt,
        "negative_prompt": negative_prompt,
        "height": height,
        "width": width,
        "num_frames": num_frames,
        "frame_rate": float(frame_rate),
        "num_inference_steps": steps,
        "guidance_scale": guidance_scale,
        # The legacy sampling knobs off, as diffusers' own tests pin them.
        "stg_scale": 0.0,
        "modality_scale": 1.0,
        "guidance_rescale": 0.0,
        "audio_guidance_scale": guidance_scale,
        "audio_stg_scale": 0.0,
        "audio_modality_scale": 1.0,
        "audio_guidance_rescale": 0.0,
        "spatio_temporal_guidance_blocks": None,
        "use_cross_timestep": False,
        "latents": latents,
        "audio_latents": audio_latents,
        "max_sequence_length": 16,
        "output_type": "np",
    }


def ltx2_t2va(
    prompt: str = "a robot dancing in the rain",
    negative_prompt: str = "",
    steps: int = 2,
    height: int = 32,
    width: int = 32,
    num_frames: int = 9,
    frame_rate: int = 25,
    guidance_scale: float = 1.0,
    shift: float = 1.0,
    seed: int | None = None,
) -> dict[str, Any]:
    """LTX-2 text-to-audio+video: ``video`` (uint8 frames), ``audio`` (float32 stereo PCM),
    ``mp4`` (H.264 + AAC). Returns the outputs too, for use outside the harness."""
    init_torch()
    s = _seed(seed)
    with probe.stage("PipelineBuildStage"):
        pipe = build_ltx2(s, shift=shift)
    kwargs = ltx2_inputs(
        pipe,
        s,
        prompt=prompt,
        negative_prompt=negative_prompt,
        height=height,
        width=width,
        num_frames=num_frames,
        frame_rate=frame_rate,
        steps=steps,
        guidance_scale=guidance_scale,
    )
    probe.record_input("prompt", prompt)
    with Instrument(
        pipe, stages=LTX2_STAGES, steps=steps, extra_outputs=LTX2_EXTRA_OUTPUTS
    ) as inst:
        out = pipe(**kwargs, callback_on_step_end=inst.callback)
    frames = _frames_u8(out.frames)
    pcm = out.audio[0].detach().float().numpy().astype(np.float32)
    rate = int(pipe.vocoder.config.output_sampling_rate)
    probe.fingerprint("video.frames", frames)
    probe.fingerprint("audio.pcm", pcm)
    _notes(pipe)
    probe.output("video", frames, kind="video", fps=frame_rate)
    probe.output("audio", pcm, kind="audio", sample_rate=rate)
    _export(frames, pcm, frame_rate, rate)
    return {"video": frames, "audio": pcm, "sample_rate": rate}


def wan_inputs(
    pipe: Any,
    seed: int,
    *,
    prompt: str,
    negative_prompt: str,
    height: int,
    width: int,
    num_frames: int,
    steps: int,
    guidance_scale: float,
) -> dict[str, Any]:
    """The keyword arguments of one ``WanPipeline`` call, the initial noise drawn from
    ``seed`` (a recorded input inside an attempt; bench/ calls it outside one)."""
    video_shape = (
        1,
        pipe.transformer.config.in_channels,
        (num_frames - 1) // pipe.vae_scale_factor_temporal + 1,
        height // pipe.vae_scale_factor_spatial,
        width // pipe.vae_scale_factor_spatial,
    )
    return wan_kwargs(
        prompt=prompt,
        negative_prompt=negative_prompt,
        height=height,
        width=width,
        num_frames=num_frames,
        steps=steps,
        guidance_scale=guidance_scale,
        latents=_noise(seed, "latents.video.init", video_shape),
    )


def wan_kwargs(
    *,
    prompt: str,
    negative_prompt: str,
    height: int,
    width: int,
    num_frames: int,
    steps: int,
    guidance_scale: float,
    latents: torch.Tensor,
) -> dict[str, Any]:
    """The keyword arguments of one ``WanPipeline`` call, given its initial noise."""
    return {
        "prompt": prompt,
        "negative_prompt": negative_prompt,
        "height": height,
        "width": width,
        "num_frames": num_frames,
        "num_inference_steps": steps,
        "guidance_scale": guidance_scale,
        "latents": latents,
        "max_sequence_length": 16,
        "output_type": "np",
    }


def wan_t2v(
    prompt: str = "a cat sitting on window sill sunny morning",
    negative_prompt: str = "rain",
    steps: int = 2,
    height: int = 32,
    width: int = 32,
    num_frames: int = 9,
    fps: int = 16,
    guidance_scale: float = 5.0,
    shift: float = 3.0,
    seed: int | None = None,
) -> dict[str, Any]:
    """Wan 2.1 text-to-video with classifier-free guidance: ``video`` frames and ``mp4``."""
    init_torch()
    s = _seed(seed)
    with probe.stage("PipelineBuildStage"):
        pipe = build_wan(s, shift=shift)
    kwargs = wan_inputs(
        pipe,
        s,
        prompt=prompt,
        negative_prompt=negative_prompt,
        height=height,
        width=width,
        num_frames=num_frames,
        steps=steps,
        guidance_scale=guidance_scale,
    )
    probe.record_input("prompt", prompt)
    probe.record_input("negative_prompt", negative_prompt)
    with Instrument(pipe, stages=WAN_STAGES, steps=steps) as inst:
        out = pipe(**kwargs, callback_on_step_end=inst.callback)
    frames = _frames_u8(out.frames)
    probe.fingerprint("video.frames", frames)
    _notes(pipe)
    probe.output("video", frames, kind="video", fps=fps)
    _export(frames, None, fps, 16_000)
    return {"video": frames}
