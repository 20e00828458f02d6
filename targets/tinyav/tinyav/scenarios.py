"""Scenario functions named by the case files (``target = "tinyav.scenarios:<name>"``).

The harness worker calls ``fn(**params)``. An ``AssertionError`` means the case failed; any
other exception is an error. Each scenario does real work: writes checkpoints into a fresh
temporary directory (or ``workdir``), loads them, runs the pipeline, encodes media.

This module imports nothing heavy at import time, so the cold-import scenarios stay honest
when run in a fresh interpreter.
"""

from __future__ import annotations

import importlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

from tinyav._probe import probe

QUANT_FORMATS = {"bf16": "bf16", "int8": "int8_convrot", "fp8": "fp8"}
DEFAULT_PROMPT = "a red fox trots through snowy pines at dusk, wind and footsteps"


def _seed(seed: int | None) -> int:
    s = probe.seed()
    return int(s) if s is not None else int(seed or 0)


@contextmanager
def _workdir(workdir: str | None) -> Iterator[Path]:
    """A working directory: ``workdir`` if given (kept), else a fresh temp dir (removed)."""
    if workdir is not None:
        path = Path(workdir)
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    path = Path(tempfile.mkdtemp(prefix="tinyav-"))
    try:
        yield path
    finally:
        # probe.output copies files into the run at call time, so the temp dir can go.
        shutil.rmtree(path, ignore_errors=True)


def _init_torch() -> None:
    """Pin torch's intra-op threads (``TINYAV_NUM_THREADS``, default 1).

    The model is tiny, so one thread is as fast as two when the machine is idle, and on a
    shared 2-core runner two OpenMP threads competing with other processes were measured 20x
    to 100x slower (spin-waiting barriers). Pinning also keeps reduction order, hence output
    bits, independent of the machine's core count.
    """
    import torch

    n = int(os.environ.get("TINYAV_NUM_THREADS", "1"))
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)


def _device_for(platform: str) -> str:
    """The torch device to run ``platform`` on here; CPU when that device is absent."""
    import torch

    if platform in ("cuda", "hip") and torch.cuda.is_available():
        return "cuda"
    if platform == "mps" and torch.backends.mps.is_available():
        return "mps"
    if platform == "xpu" and hasattr(torch, "xpu") and torch.xpu.is_available():
        return "xpu"
    return "cpu"


# -- pipeline ----------------------------------------------------------------------------------


def _generate(
    *,
    quant: str,
    variant: str,
    steps: int,
    prompt: str,
    num_frames: int,
    height: int,
    width: int,
    fps: int,
    guidance: float,
    seed: int | None,
    platform: str | None,
    fp8_platform: str | None,
    offload: bool,
    workdir: str | None,
    reference: bool,
) -> dict[str, Any]:
    _init_torch()
    import numpy as np
    import torch

    from tinyav import dispatch, media
    from tinyav.checkpoint import write_checkpoint
    from tinyav.pipeline import Pipeline, Request

    if quant not in QUANT_FORMATS:
        raise ValueError(f"quant must be one of {sorted(QUANT_FORMATS)}, got {quant!r}")
    s = _seed(seed)
    device = _device_for(platform or probe.platform() or "cpu")
    run_platform = dispatch.tensor_platform(torch.empty(0, device=device))
    with _workdir(workdir) as wd:
        with probe.stage("CheckpointWrite"):
            ckpt = write_checkpoint(
                wd / f"tinyav-{variant}-{quant}.safetensors",
                QUANT_FORMATS[quant],
                variant=variant,  # type: ignore[arg-type]
            )
        probe.record_input("checkpoint", ckpt)
        ref_video = ref_audio = None
        if reference:
            # The reference clip is synthesized from the seed, then round-tripped through
            # real MP4/WAV files so decoding is part of the case.
            frames, pcm = media.synthetic_reference(s, num_frames, height, width, fps)
            ref_video = str(media.write_mp4(wd / "reference.mp4", frames, None, fps=fps))
            ref_audio = str(media.write_wav(wd / "reference.wav", pcm))
        with probe.stage("LoadStage"):
            pipe = Pipeline.from_checkpoint(
                ckpt,
                platform=run_platform,
                device=device,
                offload=offload,
                fp8_platform=fp8_platform,
            )
        flavours = {
            str(m.flavour).removeprefix("torch.")
            for m in pipe.dit.modules()
            if hasattr(m, "flavour")
        }
        if flavours:
            probe.note("fp8.flavour", ",".join(sorted(flavours)))
        req = Request(
            prompt,
            num_frames=num_frames,
            height=height,
            width=width,
            fps=fps,
            steps=steps,
            guidance=guidance,
            seed=s,
            reference_video=ref_video,
            reference_audio=ref_audio,
        )
        out = pipe(req, out_path=wd / "out" / "tinyav.mp4")
        assert out.frames.shape == (num_frames, height, width, 3), out.frames.shape
        assert out.frames.dtype == np.uint8
        n_samples = round(num_frames / fps * 16_000)
        assert out.pcm.shape == (n_samples,), out.pcm.shape
        assert np.isfinite(out.pcm).all(), "non-finite audio samples"
        assert float(out.frames.std()) > 1.0, "video is constant"
        assert float(np.abs(out.pcm).max()) > 1e-3, "audio is silent"
        assert out.mp4 is not None and out.mp4.is_file()
        decoded = media.decode_video(out.mp4)
        assert decoded.shape[0] == num_frames, (
            f"MP4 has {decoded.shape[0]} frames, want {num_frames}"
        )
        assert media.decode_audio(out.mp4).size > 0, "MP4 has no audio"
        probe.note("pipeline.mode", "ref2va" if reference else "t2va")
        probe.note("checkpoint.format", QUANT_FORMATS[quant])
        return {"frames": out.frames, "pcm": out.pcm}


def t2va(
    quant: str = "bf16",
    variant: str = "full",
    steps: int = 4,
    prompt: str = DEFAULT_PROMPT,
    num_frames: int = 16,
    height: int = 64,
    width: int = 64,
    fps: int = 8,
    guidance: float = 3.0,
    seed: int | None = 0,
    platform: str | None = None,
    fp8_platform: str | None = None,
    offload: bool = False,
    workdir: str | None = None,
) -> None:
    """Text-to-video+audio from a freshly written ``quant`` checkpoint (bf16 | int8 | fp8)."""
    _generate(
        quant=quant,
        variant=variant,
        steps=steps,
        prompt=prompt,
        num_frames=num_frames,
        height=height,
        width=width,
        fps=fps,
        guidance=guidance,
        seed=seed,
        platform=platform,
        fp8_platform=fp8_platform,
        offload=offload,
        workdir=workdir,
        reference=False,
    )


def ref2va(
    quant: str = "bf16",
    variant: str = "full",
    steps: int = 4,
    prompt: str = DEFAULT_PROMPT,
    num_frames: int = 16,
    height: int = 64,
    width: int = 64,
    fps: int = 8,
    guidance: float = 3.0,
    seed: int | None = 0,
    platform: str | None = None,
    fp8_platform: str | None = None,
    offload: bool = False,
    workdir: str | None = None,
) -> None:
    """Reference-conditioned video+audio: synthesizes reference MP4/WAV, decodes, conditions."""
    _generate(
        quant=quant,
        variant=variant,
        steps=steps,
        prompt=prompt,
        num_frames=num_frames,
        height=height,
        width=width,
        fps=fps,
        guidance=guidance,
        seed=seed,
        platform=platform,
        fp8_platform=fp8_platform,
        offload=offload,
        workdir=workdir,
        reference=True,
    )


# -- loader ------------------------------------------------------------------------------------


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
    tensors equal to the file's bf16 values, everything on CPU.
    """
    _init_torch()
    import torch
    from safetensors import safe_open

    from tinyav.checkpoint import MARKER_SUFFIX, reference_model, write_checkpoint
    from tinyav.hadamard import applies
    from tinyav.loader import load_dit, quantized_modules
    from tinyav.quant.convrot_int8 import dequantize_weight

    s = _seed(seed)
    with _workdir(workdir) as wd:
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
    _init_torch()
    from tinyav import badfiles
    from tinyav.errors import CheckpointError
    from tinyav.loader import load_dit

    with _workdir(workdir) as wd:
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


# -- quant registry, fp8, dispatch ---------------------------------------------------------------


def registry_lookup(name: str, expect: str, module: str | None = None) -> None:
    """``get_quantization_config(name)`` resolves to class ``expect`` (from ``module``)."""
    from tinyav import quant

    cls = quant.get_quantization_config(name)
    assert cls.__name__ == expect, f"{name!r} resolved to {cls.__name__}, want {expect}"
    if module is not None:
        assert cls.__module__ == module, f"{name!r} came from {cls.__module__}, want {module}"
    assert quant.get_quantization_config(name) is cls, "repeated lookup returned another class"
    assert getattr(quant, expect) is cls, (
        f"package export tinyav.quant.{expect} is a different class"
    )
    assert issubclass(cls, quant.QuantizationConfig)
    probe.note("quant.canonical", quant.canonical_name(name))


def registry_custom() -> None:
    """Custom registration works; duplicates, aliases and unknown names fail clearly."""
    from tinyav import quant
    from tinyav.errors import RegistryError

    class MyConfig(quant.QuantizationConfig):
        name = "tinyav_test_custom"
        serialized_format = "tinyav_test_format"

    try:
        quant.register_quantization_config("tinyav_test_custom", MyConfig)
        assert quant.get_quantization_config("tinyav_test_custom") is MyConfig
        assert "tinyav_test_custom" in quant.available_backends()
        assert quant.backend_for_format("tinyav_test_format") == "tinyav_test_custom"
        for dup in ("tinyav_test_custom", "convrot_int8", "kitchen_int8"):
            try:
                quant.register_quantization_config(dup, MyConfig)
            except RegistryError as e:
                assert dup in str(e) and "already registered" in str(e), str(e)
            else:
                raise AssertionError(f"duplicate registration of {dup!r} was accepted")
        try:
            quant.get_quantization_config("nvfp4_magic")
        except RegistryError as e:
            assert "nvfp4_magic" in str(e) and "convrot_int8" in str(e), str(e)
        else:
            raise AssertionError("unknown backend name resolved")
        try:
            quant.register_quantization_config("bad", object)  # type: ignore[arg-type]
        except RegistryError as e:
            assert "QuantizationConfig" in str(e), str(e)
        else:
            raise AssertionError("a non-config class was registered")
    finally:
        quant._unregister("tinyav_test_custom")


def cold_import(
    module: str = "tinyav.quant",
    absent: Sequence[str] = (),
    access: str | None = None,
    present_after: Sequence[str] = (),
    absent_after: Sequence[str] = (),
) -> None:
    """In a fresh interpreter: importing ``module`` must not import ``absent``; then accessing
    attribute ``access`` (``"module:Attr"`` or a backend name for ``get_quantization_config``)
    imports ``present_after`` and still not ``absent_after``."""
    if module in sys.modules:
        raise RuntimeError(f"{module} is already imported: this case needs fresh_process = true")
    with probe.stage("ColdImport"):
        mod = importlib.import_module(module)
    leaked = [m for m in absent if m in sys.modules]
    assert not leaked, f"import {module} also imported {leaked}"
    if access is not None:
        with probe.stage("FirstLookup"):
            if ":" in access:
                mod_name, attr = access.split(":", 1)
                getattr(importlib.import_module(mod_name), attr)
            else:
                mod.get_quantization_config(access)
        missing = [m for m in present_after if m not in sys.modules]
        assert not missing, f"after {access}: {missing} not imported"
        leaked = [m for m in absent_after if m in sys.modules]
        assert not leaked, f"after {access}: {leaked} imported too"
    probe.note("import.modules", len(sys.modules))


def fp8_normalize_exact(seed: int | None = 0, workdir: str | None = None) -> None:
    """e4m3fn -> e4m3fnuz on a real FP8 checkpoint: dequantized values bit-exact, no NaN."""
    _init_torch()
    import torch

    from tinyav.checkpoint import write_checkpoint
    from tinyav.fp8 import FN, FNUZ, cast_to_fp8, normalize_e4m3fn_to_e4m3fnuz
    from tinyav.loader import load_dit, quantized_modules

    with _workdir(workdir) as wd:
        path = write_checkpoint(wd / "fp8.safetensors", "fp8", seed=_seed(seed))
        model = load_dit(path)
    layers = quantized_modules(model)
    assert layers, "no FP8 layers loaded"
    for name, mod in layers.items():
        w, ws, xs = normalize_e4m3fn_to_e4m3fnuz(mod.weight, mod.weight_scale, mod.input_scale)
        assert w.dtype == FNUZ
        assert (
            xs is not None
            and torch.equal(ws, mod.weight_scale * 2)
            and torch.equal(xs, mod.input_scale * 2)
        )
        before = mod.weight.to(torch.float32) * mod.weight_scale
        after = w.to(torch.float32) * ws
        assert torch.isfinite(after).all(), f"{name}: NaN after normalization"
        assert torch.equal(before, after), f"{name}: dequantized values changed"
    # Every e4m3fn bit pattern except NaN: negative zero must become zero, the rest halve.
    bits = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    every = bits.view(FN)
    finite = torch.isfinite(every.to(torch.float32))
    w, ws, _ = normalize_e4m3fn_to_e4m3fnuz(every[finite], torch.tensor(1.0))
    got = w.to(torch.float32) * ws
    want = every[finite].to(torch.float32)
    assert torch.equal(got, want), "bit patterns do not dequantize to the same values"
    assert int((w.view(torch.uint8) == 0x80).sum()) == 0, "0x80 (NaN in fnuz) survived"
    sat = cast_to_fp8(torch.tensor([1e4, -1e4, 300.0]), FNUZ).to(torch.float32)
    assert torch.isfinite(sat).all() and float(sat.abs().max()) == 240.0, f"clamp failed: {sat}"
    probe.note("fp8.layers", len(layers))


def fp8_flavour(platform: str, expect: str, arch: str | None = None) -> None:
    """The float8 dtype chosen for ``platform``/``arch`` is ``expect``."""
    from tinyav.fp8 import fp8_dtype_for

    got = str(fp8_dtype_for(platform, arch)).removeprefix("torch.")
    probe.note("fp8.flavour", got)
    assert got == expect, f"{platform}/{arch}: {got}, want {expect}"


def dispatch_path(
    platform: str,
    expect_int8_mm: str | None = None,
    expect_residual_gate: str | None = None,
) -> None:
    """The paths chosen for ``platform`` are the expected ones, and running them here is safe.

    The chosen plan is reported through ``probe.note`` (``dispatch.int8_mm``,
    ``dispatch.residual_gate``). A fused CUDA path must refuse this machine's tensors unless
    they are CUDA tensors; the path actually usable here must match eager numerics.
    """
    _init_torch()
    import torch

    from tinyav import dispatch
    from tinyav.errors import DispatchError
    from tinyav.quant.convrot_int8 import dequantize_weight, quantize_weight

    chosen = dispatch.plan(platform)
    chosen.report()
    if expect_int8_mm is not None:
        assert chosen.int8_mm == expect_int8_mm, f"{platform}: int8_mm={chosen.int8_mm}"
    if expect_residual_gate is not None:
        assert chosen.residual_gate == expect_residual_gate, (
            f"{platform}: gate={chosen.residual_gate}"
        )

    gen = torch.Generator().manual_seed(0)
    x, g, y = (torch.randn(2, 8, 256, generator=gen) for _ in range(3))
    here = dispatch.tensor_platform(x)
    fn = dispatch.residual_gate_fn(chosen.residual_gate)
    if chosen.residual_gate == "fused_cuda" and here != "cuda":
        try:
            fn(x, g, y)
        except DispatchError:
            pass
        else:
            raise AssertionError(f"fused CUDA gate accepted {here} tensors")
    else:
        assert torch.allclose(fn(x, g, y), x + g * y), "residual gate numerics"
    w = torch.randn(64, 256, generator=gen) / 16
    q, s = quantize_weight(w, convrot=True)
    path = chosen.int8_mm if here == "cuda" else "dequant_matmul"
    out = dispatch.int8_linear(x, q, s, None, convrot=True, groupsize=256, path=path)
    ref = torch.nn.functional.linear(x, dequantize_weight(q, s, convrot=True))
    assert torch.allclose(out, ref, atol=1e-4, rtol=1e-4), "int8 linear numerics"
