"""Tiny LTX-2 (video + audio) and Wan pipelines of diffusers, built from configs, offline.

Every module is constructed from a config with random weights drawn from its own seed
(:func:`component_seed`: the case seed mixed with the component's name), inside
``torch.random.fork_rng`` so building a pipeline neither reads nor moves the global generator.
Two processes with the same seed and thread count therefore build bit-identical weights.
The text encoders come from ``transformers`` configs (Gemma 3 for LTX-2, UMT5 for Wan) and
the tokenizers are built in memory from a tiny word-level vocabulary: no hub, no files.

The sizes follow the dummy components of diffusers' own pipeline tests, shrunk to what
32x32 frames, a handful of frames and two steps need.

Example::

    pipe = build_ltx2(seed=42)   # LTX2Pipeline on the CPU, eval mode
    pipe = build_wan(seed=42, shift=3.0)
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any, TypeVar

import torch

T = TypeVar("T")

# The prompt vocabulary: every word a case prompt may use, plus the special tokens.
_VOCABULARY = (
    "a robot dancing in the rain under neon lights city street at night slow camera pan "
    "cat sitting on window sill sunny morning ocean waves crashing rocks drum beat"
)
WORDS: tuple[str, ...] = tuple(_VOCABULARY.split())
SPECIALS = ("<pad>", "<eos>", "<bos>", "<unk>")
MAX_TOKENS = 16


def component_seed(seed: int, name: str) -> int:
    """The seed of one component: stable across processes and Python versions (CRC-32)."""
    return (int(seed) * 1_000_003 + zlib.crc32(name.encode())) % (2**63)


def seeded(seed: int, name: str, build: Callable[[], T]) -> T:
    """``build()`` with torch's CPU generator seeded for ``name``; the global state is kept."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(component_seed(seed, name))
        return build()


def tokenizer(*, bos: bool) -> Any:
    """A word-level fast tokenizer over :data:`WORDS`, built in memory.

    ``bos``: prepend ``<bos>`` (Gemma's convention); every sequence ends with ``<eos>`` (T5's).
    """
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate((*SPECIALS, *dict.fromkeys(WORDS)))}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    single = ("<bos> $A <eos>" if bos else "$A <eos>").split()
    tok.post_processor = processors.TemplateProcessing(
        single=" ".join(single),
        special_tokens=[("<bos>", vocab["<bos>"]), ("<eos>", vocab["<eos>"])],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        eos_token="<eos>",
        bos_token="<bos>",
        unk_token="<unk>",
        model_max_length=MAX_TOKENS,
    )


def _gemma3(seed: int) -> Any:
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration

    config = Gemma3Config(
        text_config={
            "vocab_size": len(SPECIALS) + len(dict.fromkeys(WORDS)),
            "hidden_size": 16,
            "intermediate_size": 32,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 8,
            "max_position_embeddings": 64,
            "sliding_window": 16,
            "pad_token_id": 0,
            "eos_token_id": 1,
            "bos_token_id": 2,
        },
        vision_config={
            "hidden_size": 16,
            "intermediate_size": 32,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "image_size": 16,
            "patch_size": 8,
        },
        mm_tokens_per_image=4,
    )
    return seeded(seed, "text_encoder", lambda: Gemma3ForConditionalGeneration(config)).eval()


def build_ltx2(seed: int, *, shift: float = 1.0) -> Any:
    """A tiny ``LTX2Pipeline``: Gemma 3 text encoder, connectors, DiT, video VAE, audio VAE,
    vocoder; stereo audio at 16 kHz. ``shift``: the flow-matching scheduler's static shift."""
    from diffusers import (
        AutoencoderKLLTX2Audio,
        AutoencoderKLLTX2Video,
        FlowMatchEulerDiscreteScheduler,
        LTX2Pipeline,
        LTX2VideoTransformer3DModel,
    )
    from diffusers.pipelines.ltx2 import LTX2TextConnectors
    from diffusers.pipelines.ltx2.vocoder import LTX2Vocoder

    text_encoder = _gemma3(seed)
    text = text_encoder.config.text_config
    transformer = seeded(
        seed,
        "transformer",
        lambda: LTX2VideoTransformer3DModel(
            in_channels=4,
            out_channels=4,
            patch_size=1,
            patch_size_t=1,
            num_attention_heads=2,
            attention_head_dim=8,
            cross_attention_dim=16,
            audio_in_channels=4,
            audio_out_channels=4,
            audio_num_attention_heads=2,
            audio_attention_head_dim=4,
            audio_cross_attention_dim=8,
            num_layers=2,
            qk_norm="rms_norm_across_heads",
            caption_channels=text.hidden_size,
            rope_double_precision=False,
            rope_type="split",
        ),
    )
    connectors = seeded(
        seed,
        "connectors",
        lambda: LTX2TextConnectors(
            caption_channels=text.hidden_size,
            text_proj_in_factor=text.num_hidden_layers + 1,
            video_connector_num_attention_heads=2,
            video_connector_attention_head_dim=8,
            video_connector_num_layers=1,
            video_connector_num_learnable_registers=None,
            audio_connector_num_attention_heads=2,
            audio_connector_attention_head_dim=8,
            audio_connector_num_layers=1,
            audio_connector_num_learnable_registers=None,
            connector_rope_base_seq_len=32,
            rope_theta=10000.0,
            rope_double_precision=False,
            causal_temporal_positioning=False,
            rope_type="split",
        ),
    )

    vae = seeded(
        seed,
        "vae",
        lambda: AutoencoderKLLTX2Video(
            in_channels=3,
            out_channels=3,
            latent_channels=4,
            block_out_channels=(8,),
            decoder_block_out_channels=(8,),
            layers_per_block=(1,),
            decoder_layers_per_block=(1, 1),
            spatio_temporal_scaling=(True,),
            decoder_spatio_temporal_scaling=(True,),
            decoder_inject_noise=(False, False),
            downsample_type=("spatial",),
            upsample_residual=(False,),
            upsample_factor=(1,),
            timestep_conditioning=False,
            patch_size=1,
            patch_size_t=1,
            encoder_causal=True,
            decoder_causal=False,
        ),
    )
    audio_vae: Any = seeded(
        seed,
        "audio_vae",
        lambda: AutoencoderKLLTX2Audio(
            base_channels=4,
            output_channels=2,
            ch_mult=(1,),
            num_res_blocks=1,
            attn_resolutions=None,
            in_channels=2,
            resolution=32,
            latent_channels=2,
            norm_type="pixel",
            causality_axis="height",
            dropout=0.0,
            mid_block_add_attention=False,
            sample_rate=16000,
            mel_hop_length=160,
            is_causal=True,
            mel_bins=8,
        ),
    )
    vocoder = seeded(
        seed,
        "vocoder",
        lambda: LTX2Vocoder(
            in_channels=audio_vae.config.output_channels * audio_vae.config.mel_bins,
            hidden_channels=32,
            out_channels=2,
            upsample_kernel_sizes=[16, 10, 8],
            upsample_factors=[8, 5, 4],
            resnet_kernel_sizes=[3],
            resnet_dilations=[[1, 3, 5]],
            leaky_relu_negative_slope=0.1,
            output_sampling_rate=16000,
        ),
    )
    pipe = LTX2Pipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(shift=shift),
        vae=vae,
        audio_vae=audio_vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer(bos=True),
        connectors=connectors,
        transformer=transformer,
        vocoder=vocoder,
        processor=None,
        prompt_enhancer=None,
        duration_head=None,
    )
    return _ready(pipe)


def build_wan(seed: int, *, shift: float = 3.0) -> Any:
    """A tiny ``WanPipeline`` (Wan 2.1 text-to-video): UMT5 text encoder, DiT, Wan VAE."""
    from diffusers import (
        AutoencoderKLWan,
        FlowMatchEulerDiscreteScheduler,
        WanPipeline,
        WanTransformer3DModel,
    )
    from transformers import UMT5Config, UMT5EncoderModel

    config = UMT5Config(
        vocab_size=len(SPECIALS) + len(dict.fromkeys(WORDS)),
        d_model=32,
        d_kv=8,
        d_ff=64,
        num_layers=2,
        num_heads=4,
        relative_attention_num_buckets=8,
        dropout_rate=0.0,
        pad_token_id=0,
        eos_token_id=1,
        decoder_start_token_id=0,
    )
    text_encoder = seeded(seed, "text_encoder", lambda: UMT5EncoderModel(config)).eval()
    vae = seeded(
        seed,
        "vae",
        lambda: AutoencoderKLWan(
            base_dim=3,
            z_dim=16,
            dim_mult=[1, 1, 1, 1],
            num_res_blocks=1,
            temperal_downsample=[False, True, True],
        ),
    )
    transformer = seeded(
        seed,
        "transformer",
        lambda: WanTransformer3DModel(
            patch_size=(1, 2, 2),
            num_attention_heads=2,
            attention_head_dim=12,
            in_channels=16,
            out_channels=16,
            text_dim=32,
            freq_dim=256,
            ffn_dim=32,
            num_layers=2,
            cross_attn_norm=True,
            qk_norm="rms_norm_across_heads",
            rope_max_seq_len=32,
        ),
    )
    pipe = WanPipeline(
        tokenizer=tokenizer(bos=False),
        text_encoder=text_encoder,
        vae=vae,
        scheduler=FlowMatchEulerDiscreteScheduler(shift=shift),
        transformer=transformer,
        transformer_2=None,
    )
    return _ready(pipe)


def _ready(pipe: Any) -> Any:
    """Eval mode everywhere (no dropout), CPU, no progress bars."""
    for module in pipe.components.values():
        if isinstance(module, torch.nn.Module):
            module.eval()
    pipe.to("cpu")
    pipe.set_progress_bar_config(disable=True)
    return pipe


def build(name: str, seed: int, *, shift: float | None = None) -> Any:
    """``build_ltx2`` or ``build_wan`` by name (``"ltx2"`` | ``"wan"``)."""
    builders: dict[str, Callable[..., Any]] = {"ltx2": build_ltx2, "wan": build_wan}
    if name not in builders:
        raise ValueError(f"unknown pipeline {name!r}; expected one of {sorted(builders)}")
    kw = {} if shift is None else {"shift": shift}
    return builders[name](seed, **kw)
