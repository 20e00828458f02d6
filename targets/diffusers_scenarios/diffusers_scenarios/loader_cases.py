"""Loader scenarios for diffusers' Wan transformer (cases/diffusers/loader.toml).

``load_exact`` builds the tiny seeded transformer, writes it as a ComfyUI single file (fused
``qkv``, Wan names), loads it back through :mod:`.loader` and notes how the result compares
with the source ``state_dict``, bit for bit, and what config the loader inferred. The scenario
judges nothing itself: the case file's ``note.*`` checks do, so a wrong conversion is a failed
check with the numbers, not a traceback.

``load_rejects`` damages one thing in a good file and notes the rejection (error class, the key
it names, whether it names the file); a damaged file that loads is noted ``loader.error =
"none"``, which fails the case's check.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from harness import probe

# The keys the defects damage (ComfyUI names, prefix included).
P = "model.diffusion_model."
DEFECT_KEYS: dict[str, str | None] = {
    "truncated_header": None,  # no key to blame: the file itself
    "missing_projection": P + "blocks.0.self_attn.qkv.weight",
    "transposed": P + "blocks.1.ffn.0.weight",
    "unknown_key": P + "img_emb.proj.1.weight",  # an image-to-video tensor this loader lacks
    "missing_scale": P + "blocks.0.ffn.2.weight_scale",
    "qkv_rows": P + "blocks.1.self_attn.qkv.bias",
}


def init_torch() -> None:
    """One intra-op thread (``DIFFUSERS_SCENARIOS_THREADS``): output bits independent of the
    machine's cores, and no spin-waiting on a shared runner."""
    import torch

    n = int(os.environ.get("DIFFUSERS_SCENARIOS_THREADS", "1"))
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)


def resolve_seed(seed: int | None) -> int:
    """The attempt's seed when running under the harness, else ``seed`` (or 0)."""
    s = probe.seed()
    return int(s) if s is not None else int(seed or 0)


@contextmanager
def workdir() -> Iterator[Path]:
    tmp = Path(tempfile.mkdtemp(prefix="diffusers-scenarios-"))
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def wan_config(layers: int, heads: int, head_dim: int) -> dict[str, Any]:
    from diffusers_scenarios.transformer_ckpt import TINY_WAN

    return {**TINY_WAN, "num_layers": layers, "num_attention_heads": heads,
            "attention_head_dim": head_dim}  # fmt: skip


def forward_inputs(cfg: dict[str, Any], seed: int) -> tuple[Any, Any, Any]:
    """Seeded latents [1, C, 3, 8, 8] (48 patch tokens), timestep, 8 text tokens."""
    import torch

    gen = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(1, cfg["in_channels"], 3, 8, 8, generator=gen)
    ctx = torch.randn(1, 8, cfg["text_dim"], generator=gen)
    return x, torch.tensor([500.0]), ctx


def _bits(t: Any) -> Any:
    import torch

    return t.detach().contiguous().reshape(-1).view(torch.uint8)


def load_exact(layers: int = 2, heads: int = 3, head_dim: int = 16, seed: int | None = 0) -> None:
    """Write the tiny Wan transformer as a ComfyUI file, load it, compare with the source.

    Notes ``loader.tensors_compared`` (the source's state_dict entries), ``loader.mismatched``
    (entries whose bytes differ; ``loader.first_mismatch`` names the first, or ``none``),
    ``loader.max_abs_diff`` over all entries, ``loader.forward_max_abs_diff`` of one seeded
    forward, ``loader.file_tensors``, and the inferred ``loader.num_layers``,
    ``loader.num_heads``, ``loader.inner_dim``, ``loader.ffn_dim``.
    """
    init_torch()
    import torch

    from diffusers_scenarios.loader import load_transformer
    from diffusers_scenarios.transformer_ckpt import build_wan, comfy_state_dict, write_checkpoint

    s = resolve_seed(seed)
    cfg = wan_config(layers, heads, head_dim)
    # diffusers imports lazily: resolve the class now, the first import (seconds) is no build.
    from diffusers import WanTransformer3DModel  # noqa: F401

    with probe.stage("BuildStage"):
        source = build_wan(cfg, s)
    with workdir() as wd:
        path = write_checkpoint(wd / "wan-comfy.safetensors", comfy_state_dict(source))
        probe.record_input("checkpoint", path)
        with probe.stage("LoadStage"):
            loaded = load_transformer(path, attention_head_dim=head_dim)
    want, got = source.state_dict(), loaded.model.state_dict()
    mismatched = sorted(
        k
        for k in want
        if k not in got
        or got[k].dtype != want[k].dtype
        or got[k].shape != want[k].shape
        or not torch.equal(_bits(got[k]), _bits(want[k]))
    )
    extra = sorted(set(got) - set(want))
    common = [k for k in want if k in got and got[k].shape == want[k].shape]
    max_abs = max(
        (float((got[k].float() - want[k].float()).abs().max()) for k in common), default=0.0
    )
    x, t, ctx = forward_inputs(cfg, s)
    with torch.no_grad(), probe.stage("ForwardStage"):
        ref = source(x, t, ctx, return_dict=False)[0]
        out = loaded.model(x, t, ctx, return_dict=False)[0]
    probe.fingerprint("forward.source", ref)
    probe.fingerprint("forward.loaded", out)
    c = loaded.config
    probe.note("loader.tensors_compared", len(want))
    probe.note("loader.mismatched", len(mismatched) + len(extra))
    probe.note("loader.first_mismatch", (mismatched + extra or ["none"])[0])
    probe.note("loader.max_abs_diff", max_abs)
    probe.note("loader.forward_max_abs_diff", float((out - ref).abs().max()))
    probe.note("loader.file_tensors", loaded.tensors_read)
    probe.note("loader.num_layers", c["num_layers"])
    probe.note("loader.num_heads", c["num_attention_heads"])
    probe.note("loader.inner_dim", c["num_attention_heads"] * c["attention_head_dim"])
    probe.note("loader.ffn_dim", c["ffn_dim"])


def make_defect(defect: str, path: Path, seed: int) -> None:
    """Write a ComfyUI file of the tiny transformer to ``path`` with ``defect`` (one of
    :data:`DEFECT_KEYS`); ``missing_scale`` starts from the INT8 ConvRot file."""
    import torch

    from diffusers_scenarios import quant
    from diffusers_scenarios.transformer_ckpt import (
        build_wan,
        comfy_state_dict,
        quantizable_layers,
        write_checkpoint,
    )

    if defect not in DEFECT_KEYS:
        raise ValueError(f"unknown defect {defect!r}; expected one of {sorted(DEFECT_KEYS)}")
    tensors = comfy_state_dict(build_wan(wan_config(2, 3, 16), seed))
    key = DEFECT_KEYS[defect]
    if defect == "missing_scale":
        tensors = quant.quantize_checkpoint(tensors, quantizable_layers(tensors))
    if defect in ("missing_projection", "missing_scale"):
        del tensors[str(key)]
    elif defect == "transposed":
        tensors[str(key)] = tensors[str(key)].t().contiguous()
    elif defect == "unknown_key":
        tensors[str(key)] = torch.zeros(48, 32)
    elif defect == "qkv_rows":
        tensors[str(key)] = tensors[str(key)][:-1].contiguous()  # 143 rows: not 3 x 48
    write_checkpoint(path, tensors)
    if defect == "truncated_header":
        raw = path.read_bytes()
        n = int.from_bytes(raw[:8], "little")
        path.write_bytes(raw[: 8 + n // 2])  # cut inside the JSON header


def load_rejects(defect: str, seed: int | None = 0) -> None:
    """A damaged ComfyUI file is rejected with a :class:`~.loader.CheckpointError` naming it.

    Notes ``loader.error`` (the error class, ``none`` if the file loaded), ``loader.key`` (the
    key the error names, ``none`` for a file-level error), ``loader.names_file`` and
    ``loader.names_expected_key`` (whether the message names the file and the damaged key),
    ``loader.message``.
    """
    init_torch()
    from diffusers_scenarios.loader import CheckpointError, load_transformer

    with workdir() as wd:
        path = wd / f"wan-{defect}.safetensors"
        make_defect(defect, path, resolve_seed(seed))
        try:
            load_transformer(path, attention_head_dim=16)
        except CheckpointError as e:
            err: CheckpointError | None = e
        else:
            err = None
    expected = DEFECT_KEYS[defect]
    msg = str(err) if err is not None else "loaded without error"
    probe.note("loader.error", type(err).__name__ if err is not None else "none")
    probe.note("loader.key", (err.key if err is not None else None) or "none")
    probe.note("loader.names_file", path.name in msg)
    probe.note("loader.names_expected_key", expected is None or expected in msg)
    probe.note("loader.message", msg)
