"""The tinyav networks: a joint video+audio DiT and its small companions.

The DiT mirrors the layout of real single-file audio-video DiT checkpoints (``video_patch_proj``,
``audio_patch_proj``, ``blocks.N.attn.qkv_proj`` with fused q,k,v rows) at toy size. Two
variants share everything but the timestep conditioning:

- ``full``: sinusoidal timestep -> ``time_embedder`` MLP -> per-block AdaLN ``Linear(hidden,
  6*hidden)`` on SiLU(temb).
- ``pruned``: ``adaln_t_table`` [1025, r] linearly interpolated at t = 1 - sigma in [0, 1]
  replaces the time embedder; AdaLN projections are rank r, no SiLU, modulation in float32.

Companions (not part of the DiT checkpoint, built deterministically from a seed, like the
encoder/VAE folder that accompanies a single-file transformer): ``TextEncoder`` (hashed tokens),
``VideoDecoder`` (latents -> uint8 RGB), ``AudioDecoder`` (latents -> float32 PCM),
and ``ReferenceEncoder`` (decoded reference media -> latents, parameter-free).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

from tinyav import dispatch

Variant = Literal["full", "pruned"]

# Codec geometry: 4x temporal and 8x spatial video compression; 640 PCM samples per audio latent.
VIDEO_T_DOWN = 4
VIDEO_S_DOWN = 8
AUDIO_HOP = 640
SAMPLE_RATE = 16_000


@dataclass(frozen=True)
class DiTConfig:
    """Shape of the DiT; serialized into checkpoint metadata as JSON."""

    hidden: int = 256
    depth: int = 3
    heads: int = 4
    mlp_ratio: int = 4
    video_channels: int = 8
    audio_channels: int = 16
    patch: int = 2
    text_dim: int = 128
    freq_dim: int = 256
    variant: Variant = "full"
    adaln_rank: int = 8
    table_size: int = 1025

    def to_json(self) -> str:
        """Canonical JSON (sorted keys) for checkpoint metadata."""
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> DiTConfig:
        """Parse :meth:`to_json` output; unknown keys raise ``TypeError``."""
        return cls(**json.loads(text))


def _sinusoid(x: torch.Tensor, dim: int, max_period: float = 10_000.0) -> torch.Tensor:
    """Sinusoidal embedding of ``x`` [B] (or positions) -> [B, dim], float32."""
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32) / half)
    args = x.to(torch.float32)[:, None] * freqs.to(x.device)[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


class SelfAttention(nn.Module):
    """Multi-head self-attention with one fused projection whose rows are ordered q, k, v."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv_proj = nn.Linear(dim, 3 * dim)
        self.out_proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        qkv = self.qkv_proj(x).reshape(b, n, 3, self.heads, d // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        out = F.scaled_dot_product_attention(q, k, v)
        return self.out_proj(out.transpose(1, 2).reshape(b, n, d))


class CrossAttention(nn.Module):
    """Attention from the token sequence to the text context (fused k,v projection)."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.q_proj = nn.Linear(dim, dim)
        self.kv_proj = nn.Linear(dim, 2 * dim)
        self.out_proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, ctx: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        hd = d // self.heads
        q = self.q_proj(x).reshape(b, n, self.heads, hd).transpose(1, 2)
        kv = self.kv_proj(ctx).reshape(b, ctx.shape[1], 2, self.heads, hd)
        k, v = kv.permute(2, 0, 3, 1, 4).unbind(0)
        out = F.scaled_dot_product_attention(q, k, v)
        return self.out_proj(out.transpose(1, 2).reshape(b, n, d))


class MLP(nn.Module):
    """GELU MLP; ``fc2`` has ``mlp_ratio * hidden`` inputs (rotated by ConvRot too)."""

    def __init__(self, dim: int, ratio: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, ratio * dim)
        self.fc2 = nn.Linear(ratio * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh"))


class DiTBlock(nn.Module):
    """Joint video+audio block: AdaLN self-attention, cross-attention to text, AdaLN MLP."""

    def __init__(self, cfg: DiTConfig) -> None:
        super().__init__()
        d = cfg.hidden
        self.norm1 = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.attn = SelfAttention(d, cfg.heads)
        self.norm2 = nn.LayerNorm(d, eps=1e-6)
        self.cross_attn = CrossAttention(d, cfg.heads)
        self.norm3 = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.mlp = MLP(d, cfg.mlp_ratio)
        cond_in = d if cfg.variant == "full" else cfg.adaln_rank
        self.adaln_modulation = nn.Linear(cond_in, 6 * d)
        self.residual_gate = dispatch.eager_residual_gate

    def forward(self, x: torch.Tensor, ctx: torch.Tensor, mod: torch.Tensor) -> torch.Tensor:
        shift1, scale1, gate1, shift2, scale2, gate2 = mod.to(x.dtype).chunk(6, dim=-1)
        h = self.norm1(x) * (1 + scale1) + shift1
        x = self.residual_gate(x, gate1, self.attn(h))
        x = x + self.cross_attn(self.norm2(x), ctx)
        h = self.norm3(x) * (1 + scale2) + shift2
        return self.residual_gate(x, gate2, self.mlp(h))


class TinyDiT(nn.Module):
    """Joint video+audio diffusion transformer predicting flow-matching velocities."""

    def __init__(self, cfg: DiTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        d, p = cfg.hidden, cfg.patch
        self.video_patch_proj = nn.Linear(cfg.video_channels * p * p, d)
        self.audio_patch_proj = nn.Linear(cfg.audio_channels, d)
        self.context_proj = nn.Linear(cfg.text_dim, d)
        # Rows: video, audio, reference-video, reference-audio token types.
        self.modality_embed = nn.Parameter(torch.zeros(4, d))
        if cfg.variant == "full":
            self.time_embedder = nn.Sequential(
                nn.Linear(cfg.freq_dim, d), nn.SiLU(), nn.Linear(d, d)
            )
            self.final_modulation = nn.Linear(d, 2 * d)
        else:
            self.adaln_t_table = nn.Parameter(torch.zeros(cfg.table_size, cfg.adaln_rank))
            self.final_modulation = nn.Linear(cfg.adaln_rank, 2 * d)
        self.blocks = nn.ModuleList(DiTBlock(cfg) for _ in range(cfg.depth))
        self.final_norm = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.video_out = nn.Linear(d, cfg.video_channels * p * p)
        self.audio_out = nn.Linear(d, cfg.audio_channels)

    # -- conditioning ----------------------------------------------------------------------

    def timestep_condition(self, sigma: torch.Tensor) -> torch.Tensor:
        """The conditioning vector fed to every AdaLN projection, [B, hidden or rank]."""
        if self.cfg.variant == "full":
            freq = _sinusoid(sigma * 1000.0, self.cfg.freq_dim)
            temb = self.time_embedder(freq.to(self.video_out.weight.dtype))
            return F.silu(temb)
        # Pruned: t = 1 - sigma on the table's [0, 1] grid, lerped in float32.
        table = self.adaln_t_table.to(torch.float32)
        pos = (1.0 - sigma.to(torch.float32)).clamp(0.0, 1.0) * (self.cfg.table_size - 1)
        lo = pos.floor().long().clamp(max=self.cfg.table_size - 2)
        w = (pos - lo.to(torch.float32))[:, None]
        return table[lo] * (1.0 - w) + table[lo + 1] * w

    def _modulation(self, layer: nn.Module, cond: torch.Tensor) -> torch.Tensor:
        if self.cfg.variant == "pruned":
            # fp32 modulation: the rank-r curve is too smooth to survive bf16 rounding.
            return layer(cond.to(torch.float32)).to(torch.float32)
        return layer(cond.to(self.video_out.weight.dtype))

    # -- token plumbing --------------------------------------------------------------------

    def _video_tokens(self, lat: torch.Tensor) -> torch.Tensor:
        b, c, t, h, w = lat.shape
        p = self.cfg.patch
        x = lat.reshape(b, c, t, h // p, p, w // p, p).permute(0, 2, 3, 5, 1, 4, 6)
        return x.reshape(b, t * (h // p) * (w // p), c * p * p)

    def _video_untokens(self, x: torch.Tensor, shape: torch.Size) -> torch.Tensor:
        b, c, t, h, w = shape
        p = self.cfg.patch
        x = x.reshape(b, t, h // p, w // p, c, p, p).permute(0, 4, 1, 2, 5, 3, 6)
        return x.reshape(b, c, t, h, w)

    def _embed(
        self, video: torch.Tensor, audio: torch.Tensor, vtype: int, atype: int
    ) -> torch.Tensor:
        dtype = self.video_out.weight.dtype
        v = self.video_patch_proj(self._video_tokens(video).to(dtype))
        a = self.audio_patch_proj(audio.transpose(1, 2).to(dtype))
        d = self.cfg.hidden
        vpos = _sinusoid(torch.arange(v.shape[1], device=v.device), d).to(dtype)
        apos = _sinusoid(torch.arange(a.shape[1], device=a.device), d).to(dtype)
        emb = self.modality_embed.to(dtype)
        return torch.cat([v + vpos + emb[vtype], a + apos + emb[atype]], dim=1)

    def forward(
        self,
        video: torch.Tensor,
        audio: torch.Tensor,
        sigma: torch.Tensor,
        context: torch.Tensor,
        ref_video: torch.Tensor | None = None,
        ref_audio: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Velocities for video latents [B,C,T,H,W] and audio latents [B,C,L] at ``sigma`` [B].

        Reference latents, when given, join the token sequence as clean in-context tokens.
        """
        dtype = self.video_out.weight.dtype
        x = self._embed(video, audio, 0, 1)
        n_gen = x.shape[1]
        n_video = (video.shape[2] * video.shape[3] * video.shape[4]) // self.cfg.patch**2
        if ref_video is not None and ref_audio is not None:
            x = torch.cat([x, self._embed(ref_video, ref_audio, 2, 3)], dim=1)
        ctx = self.context_proj(context.to(dtype))
        cond = self.timestep_condition(sigma)
        for block in self.blocks:
            mod = self._modulation(block.adaln_modulation, cond)[:, None, :]
            x = block(x, ctx, mod)
        shift, scale = (
            self._modulation(self.final_modulation, cond)[:, None, :].to(dtype).chunk(2, -1)
        )
        x = self.final_norm(x[:, :n_gen]) * (1 + scale) + shift
        v_out = self._video_untokens(self.video_out(x[:, :n_video]), video.shape)
        a_out = self.audio_out(x[:, n_video:]).transpose(1, 2)
        return v_out.to(torch.float32), a_out.to(torch.float32)


def init_dit(cfg: DiTConfig, seed: int) -> TinyDiT:
    """A DiT with deterministic float32 weights drawn from ``seed`` (independent of global RNG).

    Built on the meta device, then given empty memory: every parameter is drawn below, so the
    layers' own initialisation (Kaiming-uniform from the global RNG, ~5 % of a pipeline case's
    work) would be thrown away. TinyDiT has no buffers and no tied parameters. The memory is
    assigned rather than made by ``Module.to_empty``, whose ``empty_like`` of a meta tensor
    goes through torch's reference implementations and imports sympy (0.45-1.1 s of CPU, the
    first time in a process)."""
    with torch.device("meta"):
        model = TinyDiT(cfg)
    shapes = model.state_dict()
    if len(shapes) != len(list(model.parameters())):
        raise RuntimeError("init_dit draws parameters only, and TinyDiT now has a buffer or ties")
    model.load_state_dict(
        {name: torch.empty(t.shape, dtype=t.dtype) for name, t in shapes.items()},
        strict=True,
        assign=True,
    )
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name == "adaln_t_table":
                # Smooth curves over t so interpolation between rows matters.
                t = torch.linspace(0.0, 1.0, cfg.table_size)[:, None]
                k = torch.arange(1, cfg.adaln_rank + 1, dtype=torch.float32)[None]
                phase = torch.rand(1, cfg.adaln_rank, generator=gen) * math.tau
                param.copy_(torch.sin(math.pi * k * t + phase))
            elif param.ndim == 2:
                fan_in = param.shape[1]
                param.copy_(torch.randn(param.shape, generator=gen) / math.sqrt(fan_in))
            elif "norm" in name and name.endswith("weight"):
                param.fill_(1.0)
            else:
                param.copy_(torch.randn(param.shape, generator=gen) * 0.02)
        for block in model.blocks:
            # Small AdaLN output keeps the untrained modulation near identity and outputs tame.
            block.adaln_modulation.weight.mul_(0.1)
    return model.eval().requires_grad_(False)


# -- companions ------------------------------------------------------------------------------

VOCAB = 4096
MAX_TOKENS = 16


def tokenize(prompt: str) -> list[int]:
    """Hash words to ids in [1, VOCAB); 0 pads. Stable across processes (not ``hash()``)."""
    ids = []
    for word in prompt.lower().split()[:MAX_TOKENS]:
        digest = hashlib.blake2b(word.encode(), digest_size=4).digest()
        ids.append(1 + int.from_bytes(digest, "little") % (VOCAB - 1))
    return ids + [0] * (MAX_TOKENS - len(ids))


class TextEncoder(nn.Module):
    """Embedding + two pre-norm transformer layers over hashed tokens -> [B, 16, dim]."""

    def __init__(self, dim: int = 128, layers: int = 2, heads: int = 4) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, dim)
        self.pos = nn.Parameter(torch.zeros(MAX_TOKENS, dim))
        self.layers = nn.ModuleList(
            nn.ModuleDict(
                {
                    "norm1": nn.LayerNorm(dim),
                    "attn": SelfAttention(dim, heads),
                    "norm2": nn.LayerNorm(dim),
                    "mlp": MLP(dim, 2),
                }
            )
            for _ in range(layers)
        )
        self.norm = nn.LayerNorm(dim)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids) + self.pos
        for layer in self.layers:
            x = x + layer["attn"](layer["norm1"](x))
            x = x + layer["mlp"](layer["norm2"](x))
        return self.norm(x)


class VideoDecoder(nn.Module):
    """Latents [B,C,T',H',W'] -> uint8 RGB frames [B, 4T', 8H', 8W', 3]."""

    def __init__(self, channels: int = 8, width: int = 32) -> None:
        super().__init__()
        self.conv = nn.Conv3d(channels, width, 3, padding=1)
        self.to_pixels = nn.Linear(width, VIDEO_T_DOWN * VIDEO_S_DOWN * VIDEO_S_DOWN * 3)

    def forward(self, lat: torch.Tensor) -> torch.Tensor:
        b, _, t, h, w = lat.shape
        x = F.gelu(self.conv(lat.to(torch.float32))).permute(0, 2, 3, 4, 1)
        x = self.to_pixels(x).reshape(b, t, h, w, VIDEO_T_DOWN, VIDEO_S_DOWN, VIDEO_S_DOWN, 3)
        x = x.permute(0, 1, 4, 2, 5, 3, 6, 7).reshape(
            b, t * VIDEO_T_DOWN, h * VIDEO_S_DOWN, w * VIDEO_S_DOWN, 3
        )
        return ((torch.tanh(x) + 1.0) * 127.5).round().clamp(0, 255).to(torch.uint8)


class AudioDecoder(nn.Module):
    """Latents [B,C,L] -> mono float32 PCM [B, L*640] in (-1, 1) at 16 kHz."""

    def __init__(self, channels: int = 16, width: int = 64) -> None:
        super().__init__()
        self.conv = nn.Conv1d(channels, width, 3, padding=1)
        self.to_samples = nn.Linear(width, AUDIO_HOP)

    def forward(self, lat: torch.Tensor) -> torch.Tensor:
        x = F.gelu(self.conv(lat.to(torch.float32))).transpose(1, 2)
        pcm = torch.tanh(self.to_samples(x)) * 0.8
        return pcm.reshape(lat.shape[0], -1).contiguous()


class ReferenceEncoder(nn.Module):
    """Parameter-free stand-in for the VAE encoders: pools reference media onto the latent grid.

    Fixed (seeded) channel mixing matrices make the result depend on colour and spectrum.
    """

    def __init__(self, video_channels: int = 8, audio_channels: int = 16, seed: int = 0) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.register_buffer("video_mix", torch.randn(3, video_channels, generator=gen))
        self.register_buffer(
            "audio_mix", torch.randn(AUDIO_HOP // 40, audio_channels, generator=gen)
        )

    def encode_video(self, frames: torch.Tensor, t: int, h: int, w: int) -> torch.Tensor:
        """uint8 [T,H,W,3] -> latents [1, C, t, h, w]."""
        x = frames.to(torch.float32).permute(3, 0, 1, 2)[None] / 127.5 - 1.0
        x = F.adaptive_avg_pool3d(x, (t, h, w))
        return torch.einsum("bcthw,cd->bdthw", x, self.video_mix)

    def encode_audio(self, pcm: torch.Tensor, length: int) -> torch.Tensor:
        """float32 PCM [N] -> latents [1, C, length] (log band energies, mixed)."""
        need = length * AUDIO_HOP
        x = F.pad(pcm.to(torch.float32), (0, max(0, need - pcm.shape[0])))[:need]
        bands = x.reshape(length, AUDIO_HOP // 40, 40).abs().mean(-1)
        feats = torch.log1p(bands * 10.0) @ self.audio_mix
        return feats.T[None]


@dataclass
class Companions:
    """Everything the pipeline needs besides the DiT."""

    text_encoder: TextEncoder
    video_decoder: VideoDecoder
    audio_decoder: AudioDecoder
    reference_encoder: ReferenceEncoder


def init_companions(cfg: DiTConfig, seed: int = 1234) -> Companions:
    """Deterministic companions matching ``cfg`` (float32, eval mode, frozen)."""
    gen = torch.Generator().manual_seed(seed)
    mods: dict[str, Any] = {
        "text_encoder": TextEncoder(cfg.text_dim),
        "video_decoder": VideoDecoder(cfg.video_channels),
        "audio_decoder": AudioDecoder(cfg.audio_channels),
    }
    with torch.no_grad():
        for mod in mods.values():
            for name, param in mod.named_parameters():
                if param.ndim >= 2:
                    fan_in = param[0].numel()
                    param.copy_(torch.randn(param.shape, generator=gen) / math.sqrt(fan_in))
                elif "norm" in name and name.endswith("weight"):
                    param.fill_(1.0)
                else:
                    param.copy_(torch.randn(param.shape, generator=gen) * 0.02)
            mod.eval().requires_grad_(False)
    ref = ReferenceEncoder(cfg.video_channels, cfg.audio_channels, seed=seed + 1)
    return Companions(reference_encoder=ref.eval(), **mods)
