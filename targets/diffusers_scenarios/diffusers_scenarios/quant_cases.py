"""Quant-dispatch scenario for diffusers' Wan transformer (cases/diffusers/quant.toml).

``int8_convrot`` writes the tiny seeded transformer as an INT8 ConvRot ComfyUI file, loads it
through :mod:`.loader` (which swaps :class:`~.quant.Int8ConvRotLinear` in for the marked
``nn.Linear`` layers from outside), plans the INT8 matmul path for the attempt's platform,
runs one seeded forward of the float source and of the INT8 model, and notes:

- exactness of the load: ``quant.layers``, ``quant.exact_layers`` (int8 weight and float32
  ``[out, 1]`` scale bit-identical to the file), ``quant.groups`` (the ConvRot groups used),
  ``quant.marker_keys_in_state`` (``comfy_quant`` markers that leaked into the state dict);
- dispatch: ``dispatch.platform``, ``dispatch.capabilities_from`` (``platform_info`` when the
  harness gives the platform's capabilities, else ``platform name``), ``dispatch.int8_mm.plan``
  (what was decided), ``dispatch.int8_mm.ran`` (what executed, counted in the modules),
  ``device.ran`` (where the tensors really were);
- numerics against the float path: ``quant.rel_l2`` (``||y_q - y|| / ||y||``),
  ``quant.max_abs_rel`` (``max |y_q - y| / max |y|``) and ``quant.cosine``.
"""

from __future__ import annotations

from typing import Any

from diffusers_scenarios.loader_cases import (
    forward_inputs,
    init_torch,
    resolve_seed,
    wan_config,
    workdir,
)
from harness import probe


def platform_identity() -> tuple[str, list[str] | None, str]:
    """The attempt's platform, its capabilities if the harness tells them, and where from."""
    platform = probe.platform() or "cpu"
    info_fn = getattr(probe, "platform_info", None)
    info: Any = info_fn() if callable(info_fn) else None
    caps = info.get("capabilities") if isinstance(info, dict) else None
    if isinstance(caps, list | tuple):
        return platform, [str(c) for c in caps], "platform_info"
    return platform, None, "platform name"


def device_for(platform: str) -> str:
    """The torch device that really serves ``platform`` here (``cpu`` when it is absent)."""
    import torch

    if platform in ("cuda", "hip") and torch.cuda.is_available():
        is_hip = bool(getattr(torch.version, "hip", None))
        if is_hip == (platform == "hip"):
            return "cuda"
    return "cpu"


def int8_convrot(layers: int = 2, seed: int | None = 0, batch: int = 1) -> None:
    """INT8 ConvRot Wan transformer against its float source; see the module doc for notes."""
    init_torch()
    import torch

    from diffusers_scenarios import quant
    from diffusers_scenarios.loader import load_transformer
    from diffusers_scenarios.transformer_ckpt import (
        build_wan,
        comfy_state_dict,
        quantizable_layers,
        write_checkpoint,
    )

    s = resolve_seed(seed)
    cfg = wan_config(layers, 3, 16)
    source = build_wan(cfg, s)
    tensors = comfy_state_dict(source)
    file_tensors = quant.quantize_checkpoint(tensors, quantizable_layers(tensors))
    with workdir() as wd:
        path = write_checkpoint(wd / "wan-int8-convrot.safetensors", file_tensors)
        probe.record_input("checkpoint", path)
        with probe.stage("LoadStage"):
            loaded = load_transformer(path, attention_head_dim=16)
    model = loaded.model
    mods = quant.quantized_modules(model)
    exact = 0
    for name, mod in mods.items():
        w_ok = mod.weight.dtype == torch.int8 and mod.weight_scale.dtype == torch.float32
        w_ok = w_ok and tuple(mod.weight_scale.shape) == (mod.out_features, 1)
        for attr, rows in (("weight", mod.weight), ("weight_scale", mod.weight_scale)):
            w_ok = w_ok and _matches_file(file_tensors, name, attr, rows)
        exact += int(w_ok)
    state = model.state_dict()

    platform, caps, caps_from = platform_identity()
    plan = quant.plan_int8_mm(platform, caps)
    quant.set_path(model, plan)
    device = device_for(platform)
    model.to(device)
    source.to(device)
    x, t, ctx = (v.to(device) for v in forward_inputs(cfg, s))
    if batch > 1:
        x, t, ctx = x.repeat(batch, 1, 1, 1, 1), t.repeat(batch), ctx.repeat(batch, 1, 1)
    with torch.no_grad():
        with probe.stage("FloatForward"):
            ref = source(x, t, ctx, return_dict=False)[0]
        with probe.stage("Int8Forward"):
            out = model(x, t, ctx, return_dict=False)[0]
    probe.fingerprint("forward.float", ref)
    probe.fingerprint("forward.int8", out)
    diff = (out - ref).float()
    probe.note("quant.layers", len(mods))
    probe.note("quant.exact_layers", exact)
    probe.note("quant.groups", ",".join(str(g) for g in sorted(set(loaded.groups.values()))))
    probe.note("quant.marker_keys_in_state", sum(k.endswith(quant.MARKER_SUFFIX) for k in state))
    probe.note("dispatch.platform", platform)
    probe.note("dispatch.capabilities_from", caps_from)
    probe.note("dispatch.int8_mm.plan", plan)
    probe.note("dispatch.int8_mm.ran", quant.executed(model))
    probe.note("device.ran", str(x.device.type))
    probe.note("quant.rel_l2", float(diff.norm() / ref.float().norm()))
    probe.note("quant.max_abs_rel", float(diff.abs().max() / ref.float().abs().max()))
    cos = torch.nn.functional.cosine_similarity(out.flatten().float(), ref.flatten().float(), dim=0)
    probe.note("quant.cosine", float(cos))


def _matches_file(file_tensors: dict[str, Any], layer: str, attr: str, got: Any) -> bool:
    """Whether module ``layer``'s ``attr`` equals the file's bytes (the fused qkv's rows)."""
    import torch

    from diffusers_scenarios.transformer_ckpt import PREFIX, comfy_name

    parts = layer.split(".")
    if len(parts) == 4 and parts[2] == "attn1" and parts[3] in ("to_q", "to_k", "to_v"):
        fused = file_tensors[f"{PREFIX}blocks.{parts[1]}.self_attn.qkv.{attr}"]
        rows = fused.shape[0] // 3  # the writer's order is q, k, v, whatever the loader assumes
        i = ("to_q", "to_k", "to_v").index(parts[3])
        want = fused[i * rows : (i + 1) * rows]
    else:
        want = file_tensors[comfy_name(f"{layer}.weight").removesuffix("weight") + attr]
    return bool(got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want))
