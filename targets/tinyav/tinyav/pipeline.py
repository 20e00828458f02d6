"""The staged text/reference-to-video+audio pipeline.

Stages run in order, each inside ``probe.stage(<StageName>)`` with its main tensors
fingerprinted, so the harness can time them and find the first stage where two runs diverge:

``InputValidationStage`` -> ``TextEncodingStage`` -> ``LatentPreparationStage`` ->
``DenoisingStage`` (``DenoisingStage.stepNN`` per step) -> ``VideoDecodingStage`` ->
``AudioDecodingStage`` -> ``ExportStage``.

Sampling is flow-matching Euler from sigma 1 to 0 with classifier-free guidance.
"""

from __future__ import annotations

import math
import os
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from tinyav import dispatch, media
from tinyav._probe import probe
from tinyav.loader import load_dit
from tinyav.model import (
    AUDIO_HOP,
    SAMPLE_RATE,
    VIDEO_S_DOWN,
    VIDEO_T_DOWN,
    Companions,
    TinyDiT,
    init_companions,
    tokenize,
)


@dataclass(frozen=True)
class Request:
    """One generation request. ``reference_video``/``reference_audio`` switch to Ref2VA mode."""

    prompt: str
    negative_prompt: str = ""
    num_frames: int = 16
    height: int = 64
    width: int = 64
    fps: int = 8
    steps: int = 4
    guidance: float = 3.0
    seed: int = 0
    reference_video: str | None = None
    reference_audio: str | None = None


@dataclass(frozen=True)
class Result:
    """Decoded outputs: uint8 frames [T,H,W,3], float32 PCM [N], and the MP4 path (or None)."""

    frames: np.ndarray
    pcm: np.ndarray
    mp4: Path | None


class Pipeline:
    """A loaded DiT plus companions, configured for one platform.

    >>> pipe = Pipeline.from_checkpoint("dit.safetensors")        # doctest: +SKIP
    >>> pipe(Request("a red fox"), out_path="fox.mp4").frames.shape  # doctest: +SKIP
    (16, 64, 64, 3)
    """

    def __init__(
        self,
        dit: TinyDiT,
        companions: Companions,
        *,
        platform: str = "cpu",
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        arch: str | None = None,
        fp8_platform: str | None = None,
        capabilities: Collection[str] | None = None,
        fp8_dtype: torch.dtype | None = None,
        execute_on: str | None = None,
    ) -> None:
        self.dit = dit
        self.companions = companions
        self.device = torch.device(device)
        self.dtype = dtype
        self.plan = dispatch.plan(platform, capabilities)
        dispatch.apply(
            self.dit, self.plan, arch, fp8_platform, fp8_dtype=fp8_dtype, execute_on=execute_on
        )

    @classmethod
    def from_checkpoint(
        cls,
        path: str | os.PathLike[str],
        *,
        quantization: str | None = None,
        platform: str = "cpu",
        device: str = "cpu",
        dtype: torch.dtype = torch.float32,
        offload: bool = False,
        arch: str | None = None,
        fp8_platform: str | None = None,
        capabilities: Collection[str] | None = None,
        fp8_dtype: torch.dtype | None = None,
        execute_on: str | None = None,
    ) -> Pipeline:
        """Load ``path`` through :func:`tinyav.loader.load_dit` and build the companions.

        ``platform`` and ``capabilities`` decide the kernel paths, ``execute_on`` names the
        platform whose tensors really run when it differs (see :func:`tinyav.dispatch.apply`).
        """
        dit = load_dit(path, quantization=quantization, device=device, dtype=dtype, offload=offload)
        return cls(
            dit,
            init_companions(dit.cfg),
            platform=platform,
            device=device,
            dtype=dtype,
            arch=arch,
            fp8_platform=fp8_platform,
            capabilities=capabilities,
            fp8_dtype=fp8_dtype,
            execute_on=execute_on,
        )

    # -- stages --------------------------------------------------------------------------

    def _validate(self, req: Request) -> None:
        problems = []
        if req.num_frames <= 0 or req.num_frames % VIDEO_T_DOWN:
            problems.append(
                f"num_frames={req.num_frames} must be a positive multiple of {VIDEO_T_DOWN}"
            )
        spatial = VIDEO_S_DOWN * self.dit.cfg.patch
        for name, v in (("height", req.height), ("width", req.width)):
            if v <= 0 or v % spatial:
                problems.append(f"{name}={v} must be a positive multiple of {spatial}")
        if req.steps < 1:
            problems.append(f"steps={req.steps} must be >= 1")
        if req.fps < 1:
            problems.append(f"fps={req.fps} must be >= 1")
        if (req.reference_video is None) != (req.reference_audio is None):
            problems.append("reference_video and reference_audio must be given together")
        for ref in (req.reference_video, req.reference_audio):
            if ref is not None and not Path(ref).is_file():
                problems.append(f"reference file {ref!r} does not exist")
        if problems:
            raise ValueError("invalid request: " + "; ".join(problems))

    def _audio_length(self, req: Request) -> int:
        return math.ceil(req.num_frames / req.fps * SAMPLE_RATE / AUDIO_HOP)

    def _encode_text(self, req: Request) -> torch.Tensor:
        ids = torch.tensor([tokenize(req.negative_prompt), tokenize(req.prompt)])
        with torch.no_grad():
            return self.companions.text_encoder(ids).to(self.device)

    def _references(self, req: Request) -> tuple[torch.Tensor, torch.Tensor] | None:
        if req.reference_video is None or req.reference_audio is None:
            return None
        frames = media.decode_video(req.reference_video, width=req.width, height=req.height)
        pcm = media.decode_audio(req.reference_audio, SAMPLE_RATE)
        probe.record_input("reference_video", frames)
        probe.record_input("reference_audio", pcm)
        enc = self.companions.reference_encoder
        t, h, w = (
            req.num_frames // VIDEO_T_DOWN,
            req.height // VIDEO_S_DOWN,
            req.width // VIDEO_S_DOWN,
        )
        with torch.no_grad():
            rv = enc.encode_video(torch.from_numpy(frames), t, h, w)
            ra = enc.encode_audio(torch.from_numpy(pcm), self._audio_length(req))
        return rv.to(self.device), ra.to(self.device)

    def _noise(self, req: Request) -> tuple[torch.Tensor, torch.Tensor]:
        cfg = self.dit.cfg
        gen = torch.Generator().manual_seed(req.seed)
        t, h, w = (
            req.num_frames // VIDEO_T_DOWN,
            req.height // VIDEO_S_DOWN,
            req.width // VIDEO_S_DOWN,
        )
        video = torch.randn(1, cfg.video_channels, t, h, w, generator=gen)
        audio = torch.randn(1, cfg.audio_channels, self._audio_length(req), generator=gen)
        return video.to(self.device), audio.to(self.device)

    def _denoise(
        self,
        req: Request,
        video: torch.Tensor,
        audio: torch.Tensor,
        context: torch.Tensor,
        refs: tuple[torch.Tensor, torch.Tensor] | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        sigmas = torch.linspace(1.0, 0.0, req.steps + 1)
        ref_v = ref_a = None
        if refs is not None:
            ref_v, ref_a = (r.expand(2, *r.shape[1:]) for r in refs)
        for i in range(req.steps):
            with probe.stage(f"DenoisingStage.step{i:02d}"), torch.no_grad():
                sigma = sigmas[i].expand(2).to(self.device)
                v_vel, a_vel = self.dit(
                    video.expand(2, *video.shape[1:]).to(self.dtype),
                    audio.expand(2, *audio.shape[1:]).to(self.dtype),
                    sigma,
                    context.to(self.dtype),
                    ref_v if ref_v is None else ref_v.to(self.dtype),
                    ref_a if ref_a is None else ref_a.to(self.dtype),
                )
                # CFG: row 0 is unconditional (negative prompt), row 1 conditional.
                v = v_vel[:1] + req.guidance * (v_vel[1:] - v_vel[:1])
                a = a_vel[:1] + req.guidance * (a_vel[1:] - a_vel[:1])
                dt = float(sigmas[i + 1] - sigmas[i])
                video = video + dt * v
                audio = audio + dt * a
            probe.fingerprint(f"denoise.step{i:02d}", video)
            probe.fingerprint(f"denoise.step{i:02d}.audio", audio)
        return video, audio

    def __call__(self, req: Request, out_path: str | os.PathLike[str] | None = None) -> Result:
        """Run every stage; writes the MP4 to ``out_path`` when given.

        Besides stages and fingerprints it notes what it decided and what executed:
        ``pipeline.mode`` (``ref2va`` when reference media were decoded and fed to the DiT,
        else ``t2va``), ``device.ran`` (the platform of the latents the DiT computed on),
        ``dispatch.<op>.plan`` and ``dispatch.<op>.ran`` (see :mod:`tinyav.dispatch`).
        """
        self.plan.report()
        with probe.stage("InputValidationStage"):
            self._validate(req)
            refs = self._references(req)
        probe.note("pipeline.mode", "t2va" if refs is None else "ref2va")
        with probe.stage("TextEncodingStage"):
            context = self._encode_text(req)
        probe.fingerprint("text.context", context)
        with probe.stage("LatentPreparationStage"):
            video, audio = self._noise(req)
        probe.fingerprint("latents.video.init", video)
        probe.fingerprint("latents.audio.init", audio)
        with probe.stage("DenoisingStage"), dispatch.recording() as executed:
            video, audio = self._denoise(req, video, audio, context, refs)
        executed.report()
        probe.note("device.ran", dispatch.tensor_platform(video))
        with probe.stage("VideoDecodingStage"), torch.no_grad():
            frames = self.companions.video_decoder(video.to(torch.float32).cpu())[0].numpy()
        probe.fingerprint("video.frames", frames)
        with probe.stage("AudioDecodingStage"), torch.no_grad():
            n = round(req.num_frames / req.fps * SAMPLE_RATE)
            pcm = self.companions.audio_decoder(audio.to(torch.float32).cpu())[0, :n].numpy()
        probe.fingerprint("audio.pcm", pcm)
        mp4 = None
        with probe.stage("ExportStage"):
            if out_path is not None:
                mp4 = media.write_mp4(out_path, frames, pcm, fps=req.fps, sample_rate=SAMPLE_RATE)
        probe.output("video", frames, kind="video", fps=req.fps)
        probe.output("audio", pcm, kind="audio", sample_rate=SAMPLE_RATE)
        if mp4 is not None:
            probe.output("mp4", mp4, kind="file")
        return Result(frames, pcm, mp4)
