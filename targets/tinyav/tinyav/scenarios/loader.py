"""Loader scenarios: a checkpoint loads exactly as serialized (``load_exact``), and a damaged
or conflicting one is rejected from its header alone with a precise error (``load_rejects``)."""

from __future__ import annotations

from typing import Any
from unittest import mock

from tinyav._probe import probe
from tinyav.scenarios import _common
from tinyav.scenarios._common import init_torch, resolve_seed


def load_exact(
    fmt: str = "int8_convrot",
    variant: str = "full",
    offload: bool = False,
    runtime_quant: str | None = None,
    seed: int | None = 0,
    workdir: str | None = None,
) -> None:
    """Load a checkpoint and assert it arrived exactly as serialized.

    Quantized weights and float32 scales bit-identical to the file, every tensor frozen, no
    ``comfy_quant`` key in the module state dict, fused QKV rows in q, k, v order, float
    tensors equal to the file's bf16 values, everything on CPU. Notes what was built:
    ``loader.quantized_layers``, ``loader.rotated_layers``, ``loader.variant`` (and the loader
    itself notes ``checkpoint.format`` as detected from the file).
    """
    init_torch()
    import torch
    from safetensors import safe_open

    from tinyav.checkpoint import MARKER_SUFFIX, reference_model, write_checkpoint
    from tinyav.hadamard import applies
    from tinyav.loader import load_dit, quantized_modules
    from tinyav.quant.convrot_int8 import dequantize_weight

    s = resolve_seed(seed)
    with _common.workdir(workdir) as wd:
        path = write_checkpoint(wd / f"{variant}-{fmt}.safetensors", fmt, variant=variant, seed=s)  # type: ignore[arg-type]
        probe.record_input("checkpoint", path)
        with probe.stage("LoadStage"):
            model = load_dit(path, quantization=runtime_quant, offload=offload)
        with safe_open(str(path), framework="pt") as f:
            file_tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 - safe_open API

    state = model.state_dict()
    leaked = [k for k in state if k.endswith(MARKER_SUFFIX)]
    assert not leaked, f"metadata-only keys leaked into the state dict: {leaked[:3]}"
    expected_keys = {k for k in file_tensors if not k.endswith(MARKER_SUFFIX)}
    assert set(state) == expected_keys, "state dict keys differ from the file's tensor keys"
    grads = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.requires_grad]
    assert not grads, f"tensors not frozen: {grads[:3]}"
    devices = {t.device.type for t in state.values()}
    assert devices == {"cpu"}, f"tensors left CPU: {devices}"
    assert getattr(model, "offload", None) is offload

    qmods = quantized_modules(model)
    markers = [k for k in file_tensors if k.endswith(MARKER_SUFFIX)]
    assert len(qmods) == len(markers), f"{len(markers)} markers but {len(qmods)} quantized modules"
    rotated = 0
    for name, mod in qmods.items():
        for suffix in ("weight", "weight_scale", "input_scale"):
            key = f"{name}.{suffix}"
            if key not in file_tensors:
                continue
            got, want = getattr(mod, suffix), file_tensors[key]
            assert got.dtype == want.dtype, f"{key}: dtype {got.dtype} != stored {want.dtype}"
            assert torch.equal(_bits(got), _bits(want)), f"{key} changed on load"
        if fmt == "int8_convrot":
            assert mod.weight.dtype == torch.int8 and mod.weight_scale.dtype == torch.float32
            assert mod.convrot == applies(mod.in_features), f"{name}: convrot={mod.convrot}"
            rotated += int(mod.convrot)
    for key, t in state.items():
        layer = key.rsplit(".", 1)[0]
        if layer in qmods and not key.endswith(".bias"):
            continue
        want = file_tensors[key].to(torch.float32)
        assert torch.equal(t.to(torch.float32), want), f"{key} differs from the file"

    # QKV layout: the fused rows must be q, k, v of the source model, in that order.
    ref = reference_model(variant, s)  # type: ignore[arg-type]
    qkv = model.blocks[0].attn.qkv_proj
    if fmt == "int8_convrot":
        w = dequantize_weight(
            qkv.weight, qkv.weight_scale, convrot=qkv.convrot, groupsize=qkv.groupsize
        )
    elif fmt == "fp8":
        w = qkv.weight.to(torch.float32) * qkv.weight_scale
    else:
        w = qkv.weight.to(torch.float32)
    src = ref.blocks[0].attn.qkv_proj.weight
    d = ref.cfg.hidden
    for i, part in enumerate("qkv"):
        errs = [
            float((w[i * d : (i + 1) * d] - src[j * d : (j + 1) * d]).abs().mean())
            for j in range(3)
        ]
        assert min(range(3), key=errs.__getitem__) == i, (
            f"QKV order broken: {part} rows match {errs}"
        )
        rel = errs[i] / float(src[i * d : (i + 1) * d].abs().mean())
        assert rel < 0.05, f"{part} rows dequantize with relative error {rel:.3f}"
    probe.note("loader.quantized_layers", len(qmods))
    probe.note("loader.rotated_layers", rotated)
    probe.note("loader.variant", model.cfg.variant)


def _bits(t: Any) -> Any:
    """The raw bytes of a tensor as uint8 (bit-exact comparison, NaN-safe)."""
    import torch

    return t.contiguous().reshape(-1).view(torch.uint8)


def load_rejects(defect: str, fmt: str = "nvfp4", workdir: str | None = None) -> None:
    """A damaged checkpoint must be rejected with a precise error, before tensor data is read."""
    init_torch()
    from tinyav import badfiles
    from tinyav.errors import CheckpointError
    from tinyav.loader import load_dit

    with _common.workdir(workdir) as wd:
        path = wd / f"bad-{defect}.safetensors"
        expect = badfiles.make(defect, path, fmt=fmt)
        runtime = badfiles.runtime_config(expect.runtime_quant)
        # Rejection must come from the header and markers alone: tensor loading is off-limits.
        with mock.patch(
            "safetensors.safe_open", side_effect=AssertionError("tensor data was read")
        ):
            try:
                load_dit(path, quantization=runtime)  # type: ignore[arg-type]
            except CheckpointError as e:
                err: CheckpointError = e
            else:
                raise AssertionError(f"{defect}: the damaged file loaded without error")
    assert isinstance(err, expect.error), (
        f"{defect}: {type(err).__name__} is not {expect.error.__name__}"
    )
    msg = str(err)
    missing = [s for s in expect.contains if s not in msg]
    assert not missing, f"{defect}: message lacks {missing}: {msg}"
    probe.note("loader.error", type(err).__name__)
    probe.note("loader.message", msg)
