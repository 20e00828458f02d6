"""Load a ComfyUI-style single-file Wan transformer into diffusers' ``WanTransformer3DModel``.

Order of work, so that a bad file is rejected by name before any tensor data is read:

1. :func:`read_header` parses the 8-byte header length and the JSON header and checks every
   entry (dtype known, shape a list of ints, byte range inside the file and equal to
   dtype x shape).
2. :func:`plan_conversion` maps every ComfyUI key to its diffusers key(s): renames from the
   table below, fused ``self_attn.qkv`` rows split into ``to_q``, ``to_k``, ``to_v`` in
   :data:`QKV_ORDER`; a key no rule knows is rejected by name. ``comfy_quant`` markers are
   validated (format, ``weight_scale`` float32 ``[out, 1]``, int8 weight) and filtered out.
3. :func:`infer_config` reads the model's config from tensor shapes: inner dim and patch from
   ``patch_embedding``, layers from the block indices, FFN, text and frequency widths from their
   first linears, heads = inner / ``attention_head_dim`` (the one number shapes cannot tell
   under ``rms_norm_across_heads``; ComfyUI fixes it per family, 128 for Wan).
4. :func:`load_transformer` builds the model, swaps the INT8 ConvRot modules in where markers
   say so (:func:`~.quant.swap_linears`), checks every expected tensor is present with its
   shape (a missing or transposed tensor is rejected by name), then reads and assigns.

Every rejection is a :class:`CheckpointError` whose message starts with the file name and names
the key.
"""

from __future__ import annotations

import json
import math
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import torch
from torch import nn

from diffusers_scenarios import quant

PREFIX = "model.diffusion_model."
# Row order of a fused self-attention ``qkv`` tensor.
QKV_ORDER: tuple[str, ...] = ("to_q", "to_k", "to_v")

# ComfyUI / Wan module -> diffusers module, outside the blocks and inside ``blocks.N.``.
GLOBAL_RULES: dict[str, str] = {
    "patch_embedding": "patch_embedding",
    "time_embedding.0": "condition_embedder.time_embedder.linear_1",
    "time_embedding.2": "condition_embedder.time_embedder.linear_2",
    "time_projection.1": "condition_embedder.time_proj",
    "text_embedding.0": "condition_embedder.text_embedder.linear_1",
    "text_embedding.2": "condition_embedder.text_embedder.linear_2",
    "head.head": "proj_out",
    "head.modulation": "scale_shift_table",
}
BLOCK_RULES: dict[str, str] = {
    "modulation": "scale_shift_table",
    "self_attn.o": "attn1.to_out.0",
    "self_attn.norm_q": "attn1.norm_q",
    "self_attn.norm_k": "attn1.norm_k",
    "cross_attn.q": "attn2.to_q",
    "cross_attn.k": "attn2.to_k",
    "cross_attn.v": "attn2.to_v",
    "cross_attn.o": "attn2.to_out.0",
    "cross_attn.norm_q": "attn2.norm_q",
    "cross_attn.norm_k": "attn2.norm_k",
    "norm3": "norm2",  # Wan's affine cross-attention norm is diffusers' norm2
    "ffn.0": "ffn.net.0.proj",
    "ffn.2": "ffn.net.2",
}
FUSED_QKV = "self_attn.qkv"
BARE_LEAVES = ("modulation",)  # parameters, not modules with .weight/.bias
LEAVES = ("weight", "bias", "weight_scale")
MARKER_LEAF = quant.MARKER_SUFFIX.removeprefix(".")

# safetensors dtype -> bytes per element
_ITEMSIZE = {
    "BOOL": 1, "U8": 1, "I8": 1, "I16": 2, "I32": 4, "I64": 8,
    "F16": 2, "BF16": 2, "F32": 4, "F64": 8, "F8_E4M3": 1, "F8_E5M2": 1,
}  # fmt: skip
MAX_HEADER_BYTES = 64 << 20


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded; the message names the file and, where one is to
    blame, the key. Subclasses say what kind of problem it is."""

    def __init__(self, path: Path, message: str, key: str | None = None) -> None:
        self.path, self.key = path, key
        where = f"{path.name}: " + (f"{key!r}: " if key else "")
        super().__init__(where + message)


class CorruptHeaderError(CheckpointError):
    """The header is truncated, not JSON, or describes bytes the file does not hold."""


class UnknownKeyError(CheckpointError):
    """A tensor no conversion rule knows (it would be silently dropped)."""


class MissingKeyError(CheckpointError):
    """A tensor the model needs is absent."""


class ShapeMismatchError(CheckpointError):
    """A tensor's shape differs from what the model (as inferred) expects."""


class QuantMarkerError(CheckpointError):
    """A ``comfy_quant`` marker that is malformed, unsupported or lacks its tensors."""


@dataclass(frozen=True)
class Entry:
    dtype: str
    shape: tuple[int, ...]


def read_header(path: str | os.PathLike[str]) -> dict[str, Entry]:
    """The validated tensor entries of a safetensors file, without reading tensor data."""
    p = Path(path)
    try:
        size = p.stat().st_size
        with p.open("rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise CorruptHeaderError(p, f"truncated: {size} bytes, no 8-byte header length")
            (n,) = struct.unpack("<Q", head)
            if n > size - 8:
                msg = f"truncated header: it declares {n} bytes, the file holds {size - 8}"
                raise CorruptHeaderError(p, msg)
            if n > MAX_HEADER_BYTES:
                raise CorruptHeaderError(p, f"header of {n} bytes exceeds {MAX_HEADER_BYTES}")
            raw = f.read(n)
    except OSError as e:
        raise CheckpointError(p, f"cannot read: {e}") from e
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CorruptHeaderError(p, f"header is not valid JSON ({e})") from e
    if not isinstance(doc, dict):
        raise CorruptHeaderError(p, "header is not a JSON object")
    doc.pop("__metadata__", None)
    data_len = size - 8 - n
    out: dict[str, Entry] = {}
    for name, spec in doc.items():
        if not isinstance(spec, dict) or set(spec) != {"dtype", "shape", "data_offsets"}:
            raise CorruptHeaderError(p, "entry needs exactly dtype, shape, data_offsets", name)
        dtype, shape, offsets = spec["dtype"], spec["shape"], spec["data_offsets"]
        if dtype not in _ITEMSIZE:
            raise CorruptHeaderError(p, f"unknown dtype {dtype!r}", name)
        if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
            raise CorruptHeaderError(p, f"shape {shape!r} is not a list of sizes", name)
        ok = isinstance(offsets, list) and len(offsets) == 2
        if not ok or not all(isinstance(o, int) for o in offsets) or offsets[0] < 0:
            raise CorruptHeaderError(p, f"data_offsets {offsets!r} are not [begin, end]", name)
        begin, end = offsets
        if end > data_len:
            raise CorruptHeaderError(p, f"truncated: bytes [{begin}, {end}) past {data_len}", name)
        if end - begin != math.prod(shape) * _ITEMSIZE[dtype]:
            raise CorruptHeaderError(p, f"{dtype} x {shape} does not fill [{begin}, {end})", name)
        out[name] = Entry(dtype, tuple(shape))
    return out


@dataclass(frozen=True)
class Plan:
    """How each ComfyUI key becomes diffusers keys, and what the header says about the model."""

    path: Path
    entries: dict[str, Entry]  # by ComfyUI key, prefix stripped
    prefixed: bool
    targets: dict[str, tuple[str, ...]]  # ComfyUI key -> diffusers keys (3 for a fused qkv)
    groups: dict[str, int] = field(default_factory=dict)  # quantized diffusers layer -> group

    def file_key(self, key: str) -> str:
        return (PREFIX if self.prefixed else "") + key


def _module_rule(module: str) -> tuple[str, ...] | None:
    if module in GLOBAL_RULES:
        return (GLOBAL_RULES[module],)
    head, _, rest = module.partition(".")
    n, _, inner = rest.partition(".")
    if head != "blocks" or not n.isdigit() or not inner:
        return None
    if inner == FUSED_QKV:
        return tuple(f"blocks.{n}.attn1.{proj}" for proj in QKV_ORDER)
    if inner in BLOCK_RULES:
        return (f"blocks.{n}.{BLOCK_RULES[inner]}",)
    return None


def plan_conversion(path: str | os.PathLike[str]) -> Plan:
    """Map every key of the file at ``path`` to diffusers keys, reading only the header."""
    p = Path(path)
    raw = read_header(p)
    prefixed = any(k.startswith(PREFIX) for k in raw)
    entries: dict[str, Entry] = {}
    for key, e in raw.items():
        if prefixed and not key.startswith(PREFIX):
            raise UnknownKeyError(p, f"outside {PREFIX!r}, where every other key lives", key)
        entries[key.removeprefix(PREFIX) if prefixed else key] = e
    targets: dict[str, tuple[str, ...]] = {}
    markers: list[str] = []
    for key in entries:
        file_key = (PREFIX if prefixed else "") + key
        module, _, leaf = key.rpartition(".")
        if leaf in BARE_LEAVES:  # a parameter, not a module (head.modulation, blocks.N.modulation)
            rule = _module_rule(key)
            if rule is None:
                raise UnknownKeyError(p, "no conversion rule for this key", file_key)
            targets[key] = rule
            continue
        rule = _module_rule(module) if module else None
        if rule is None or leaf not in (*LEAVES, MARKER_LEAF):
            raise UnknownKeyError(p, "no conversion rule for this key", file_key)
        if leaf == MARKER_LEAF:
            markers.append(module)
        else:
            targets[key] = tuple(f"{t}.{leaf}" for t in rule)
    plan = Plan(p, entries, prefixed, targets)
    if markers:
        from safetensors import safe_open

        with safe_open(str(p), framework="pt") as f:  # the small marker tensors only
            for module in markers:
                e = entries[f"{module}.{MARKER_LEAF}"]
                mkey = plan.file_key(f"{module}.{MARKER_LEAF}")
                if e.dtype != "U8" or len(e.shape) != 1:
                    msg = f"marker must be 1-D U8, is {e.dtype} {list(e.shape)}"
                    raise QuantMarkerError(p, msg, mkey)
                _check_marker(plan, module, f.get_tensor(mkey))
    for key, e in entries.items():
        module = key.rpartition(".")[0]
        if e.dtype == "I8" and module not in markers:
            raise QuantMarkerError(
                p, "is int8 but its layer has no comfy_quant marker", plan.file_key(key)
            )
    return plan


def _check_marker(plan: Plan, module: str, raw: torch.Tensor) -> None:
    """A ``comfy_quant`` marker must be valid JSON of a supported format, over an int8 weight
    and its float32 ``[out, 1]`` ``weight_scale``; records the layer's group in the plan."""
    p, mkey = plan.path, plan.file_key(f"{module}.{MARKER_LEAF}")
    try:
        m = quant.decode_marker(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise QuantMarkerError(p, f"marker is not valid JSON ({err})", mkey) from err
    if not isinstance(m, dict) or m.get("format") != quant.FORMAT:
        fmt = m.get("format") if isinstance(m, dict) else m
        raise QuantMarkerError(p, f"unsupported format {fmt!r}, expected {quant.FORMAT!r}", mkey)
    for leaf, dtype in (("weight", "I8"), ("weight_scale", "F32")):
        key = f"{module}.{leaf}"
        if key not in plan.entries:
            raise MissingKeyError(
                p, f"missing: the {quant.FORMAT} layer needs it", plan.file_key(key)
            )
        if plan.entries[key].dtype != dtype:
            got = plan.entries[key].dtype
            raise QuantMarkerError(
                p, f"is {got}, {quant.FORMAT} stores {dtype}", plan.file_key(key)
            )
    out, inp = plan.entries[f"{module}.weight"].shape
    if plan.entries[f"{module}.weight_scale"].shape != (out, 1):
        scale_shape = list(plan.entries[f"{module}.weight_scale"].shape)
        raise ShapeMismatchError(
            p, f"is {scale_shape}, expected [{out}, 1]", plan.file_key(f"{module}.weight_scale")
        )
    group = int(m.get("convrot_groupsize", 1)) if m.get("convrot") else 1
    if group != quant.group_for(inp):
        raise QuantMarkerError(
            p, f"convrot group {group} != {quant.group_for(inp)} for width {inp}", mkey
        )
    for target in plan.targets[f"{module}.weight"]:
        plan.groups[target.removesuffix(".weight")] = group


def _shape(plan: Plan, key: str) -> tuple[int, ...]:
    if key not in plan.entries:
        raise MissingKeyError(plan.path, "missing: the config is read from it", plan.file_key(key))
    return plan.entries[key].shape


def infer_config(plan: Plan, attention_head_dim: int = 128) -> dict[str, Any]:
    """``WanTransformer3DModel`` arguments read from the file's shapes (see the module doc)."""
    pe = _shape(plan, "patch_embedding.weight")
    if len(pe) != 5:
        raise ShapeMismatchError(
            plan.path,
            f"is {list(pe)}, expected a 5-D Conv3d weight",
            plan.file_key("patch_embedding.weight"),
        )
    inner, in_channels, patch = pe[0], pe[1], pe[2:]
    if inner % attention_head_dim:
        raise ShapeMismatchError(
            plan.path,
            f"inner dim {inner} is not a multiple of attention_head_dim {attention_head_dim}",
            plan.file_key("patch_embedding.weight"),
        )
    blocks = sorted({int(k.split(".")[1]) for k in plan.entries if k.startswith("blocks.")})
    if not blocks:
        raise MissingKeyError(plan.path, "no transformer blocks", plan.file_key("blocks.0"))
    for i in range(max(blocks) + 1):
        if i not in blocks:
            raise MissingKeyError(
                plan.path,
                "missing block (layers are numbered 0..n-1)",
                plan.file_key(f"blocks.{i}"),
            )
    head = _shape(plan, "head.head.weight")
    return {
        "patch_size": tuple(patch),
        "num_attention_heads": inner // attention_head_dim,
        "attention_head_dim": attention_head_dim,
        "in_channels": in_channels,
        "out_channels": head[0] // math.prod(patch),
        "text_dim": _shape(plan, "text_embedding.0.weight")[1],
        "freq_dim": _shape(plan, "time_embedding.0.weight")[1],
        "ffn_dim": _shape(plan, "blocks.0.ffn.0.weight")[0],
        "num_layers": len(blocks),
        "cross_attn_norm": "blocks.0.norm3.weight" in plan.entries,
        "qk_norm": "rms_norm_across_heads"
        if "blocks.0.self_attn.norm_q.weight" in plan.entries
        else None,
    }


def _comfy_name(plan: Plan, diffusers_key: str) -> str:
    """The ComfyUI name a missing diffusers tensor would have had (for the message)."""
    module, _, leaf = diffusers_key.rpartition(".")
    for comfy, diff in GLOBAL_RULES.items():
        if diff in (module, diffusers_key):
            return plan.file_key(comfy if diff == diffusers_key else f"{comfy}.{leaf}")
    if diffusers_key.startswith("blocks."):
        _, n, inner = diffusers_key.split(".", 2)
        mod, _, leaf = inner.rpartition(".")
        if mod.startswith("attn1.") and mod.removeprefix("attn1.") in QKV_ORDER:
            return plan.file_key(f"blocks.{n}.{FUSED_QKV}.{leaf}")
        for comfy, diff in BLOCK_RULES.items():
            if diff in (mod, inner):
                return plan.file_key(f"blocks.{n}.{comfy}" + ("" if diff == inner else f".{leaf}"))
    return diffusers_key


@dataclass(frozen=True)
class Loaded:
    model: nn.Module
    config: dict[str, Any]
    groups: dict[str, int]  # INT8 ConvRot layer -> group (empty for a float file)
    tensors_read: int


def load_transformer(path: str | os.PathLike[str], *, attention_head_dim: int = 128) -> Loaded:
    """Load the ComfyUI single file at ``path`` into a ``WanTransformer3DModel`` (CPU, eval,
    frozen). Float tensors keep the file's values (cast to the model's float32 where stored
    narrower); INT8 weights and float32 scales stay exactly as stored."""
    from diffusers import WanTransformer3DModel
    from safetensors import safe_open

    plan = plan_conversion(path)
    config = infer_config(plan, attention_head_dim)
    model = cast(nn.Module, WanTransformer3DModel(**config))  # diffusers is untyped here
    quant.swap_linears(model, plan.groups)
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    produced: dict[str, tuple[str, int, int]] = {}  # diffusers key -> (comfy key, row0, row1)
    for key, targets in plan.targets.items():
        shape = plan.entries[key].shape
        if len(targets) > 1 and shape[0] % len(targets):
            raise ShapeMismatchError(
                plan.path,
                f"{shape[0]} fused rows do not split in {len(targets)}",
                plan.file_key(key),
            )
        rows = shape[0] // len(targets) if shape else 0
        for i, t in enumerate(targets):
            produced[t] = (key, i * rows, (i + 1) * rows)
    unexpected = sorted(set(produced) - set(expected))
    if unexpected:
        comfy = produced[unexpected[0]][0]
        raise UnknownKeyError(
            plan.path,
            f"becomes {unexpected[0]!r}, which the model (as "
            "inferred from the shapes) does not have",
            plan.file_key(comfy),
        )
    missing = sorted(set(expected) - set(produced))
    if missing:
        raise MissingKeyError(
            plan.path,
            f"missing (diffusers {missing[0]!r}; {len(missing)} missing in all)",
            _comfy_name(plan, missing[0]),
        )
    for t, (key, r0, r1) in produced.items():
        shape = plan.entries[key].shape
        got = (r1 - r0, *shape[1:]) if len(plan.targets[key]) > 1 else shape
        if got != expected[t]:
            hint = " (transposed?)" if tuple(reversed(got)) == expected[t] else ""
            raise ShapeMismatchError(
                plan.path,
                f"is {list(got)}, the model expects {list(expected[t])} for {t!r}{hint}",
                plan.file_key(key),
            )
    state: dict[str, torch.Tensor] = {}
    with safe_open(str(plan.path), framework="pt") as f:
        for key, targets in plan.targets.items():
            t = f.get_tensor(plan.file_key(key))
            for target in targets:
                _, r0, r1 = produced[target]
                state[target] = t[r0:r1].clone() if len(targets) > 1 else t
    model.load_state_dict(state, strict=True)
    model.eval().requires_grad_(False)
    return Loaded(model, config, dict(plan.groups), len(plan.targets))
