"""Quantization scenarios: the backend registry, FP8 flavours, and per-platform dispatch."""

from __future__ import annotations

from tinyav._probe import probe
from tinyav.scenarios import _common
from tinyav.scenarios._common import device_for, init_torch, resolve_seed

# -- registry ------------------------------------------------------------------------------------


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


# -- fp8 -----------------------------------------------------------------------------------------


def fp8_normalize_exact(seed: int | None = 0, workdir: str | None = None) -> None:
    """e4m3fn -> e4m3fnuz on a real FP8 checkpoint: dequantized values bit-exact, no NaN."""
    init_torch()
    import torch

    from tinyav.checkpoint import write_checkpoint
    from tinyav.fp8 import FN, FNUZ, cast_to_fp8, normalize_e4m3fn_to_e4m3fnuz
    from tinyav.loader import load_dit, quantized_modules

    with _common.workdir(workdir) as wd:
        path = write_checkpoint(wd / "fp8.safetensors", "fp8", seed=resolve_seed(seed))
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


# -- dispatch ------------------------------------------------------------------------------------

# 4 x 8 = 32 activation rows (torch._int_mm needs more than 16), 256 inputs (one ConvRot group)
# and 64 outputs: every dim a multiple of 8, so on a CUDA device the int_mm path really runs.
DISPATCH_SHAPE = (4, 8, 256)
DISPATCH_OUT = 64


def dispatch_path(
    platform: str,
    expect_int8_mm: str | None = None,
    expect_residual_gate: str | None = None,
) -> None:
    """The paths planned for ``platform`` are the expected ones, and running them here is safe.

    The plan is noted as ``dispatch.<op>.plan``. The ops then run on tensors of the device that
    really serves ``platform`` here (CPU when it is absent), and what executed is noted as
    ``dispatch.<op>.ran``, counted inside :mod:`tinyav.dispatch` where the fallbacks happen,
    with ``device.ran``. A fused CUDA gate must refuse non-CUDA tensors (then nothing of the
    gate ran: ``none``); every path that ran must match eager numerics.
    """
    init_torch()
    import torch

    from tinyav import dispatch
    from tinyav.errors import DispatchError
    from tinyav.quant.convrot_int8 import dequantize_weight, quantize_weight

    # The harness's identity of ``platform`` (when this attempt is for it) decides from its
    # capabilities; otherwise the platform name and torch do.
    info = dispatch.identity_for(platform)
    chosen = dispatch.plan(platform, info.get("capabilities") if info is not None else None)
    chosen.report()
    if expect_int8_mm is not None:
        assert chosen.int8_mm == expect_int8_mm, f"{platform}: int8_mm={chosen.int8_mm}"
    if expect_residual_gate is not None:
        assert chosen.residual_gate == expect_residual_gate, (
            f"{platform}: gate={chosen.residual_gate}"
        )

    device = device_for(platform)
    gen = torch.Generator().manual_seed(0)
    x, g, y = (torch.randn(*DISPATCH_SHAPE, generator=gen).to(device) for _ in range(3))
    w = torch.randn(DISPATCH_OUT, DISPATCH_SHAPE[-1], generator=gen) / 16
    q, s = quantize_weight(w, convrot=True)
    here = dispatch.tensor_platform(x)
    probe.note("device.asked", platform)
    probe.note("device.ran", here)
    fn = dispatch.residual_gate_fn(chosen.residual_gate)
    with dispatch.recording() as executed:
        if chosen.residual_gate == "fused_cuda" and here != "cuda":
            try:
                fn(x, g, y)
            except DispatchError:
                pass
            else:
                raise AssertionError(f"fused CUDA gate accepted {here} tensors")
        else:
            # A fused kernel rounds once (fma) where eager rounds twice: allow float32 ulps.
            got = fn(x, g, y)
            assert torch.allclose(got, x + g * y, rtol=1e-5, atol=1e-6), "residual gate numerics"
        # The plan's path as is: int8_linear itself falls back where the tensors demand it.
        out = dispatch.int8_linear(
            x, q.to(device), s.to(device), None, convrot=True, groupsize=256, path=chosen.int8_mm
        )
    executed.report()
    ref = torch.nn.functional.linear(x, dequantize_weight(q, s, convrot=True).to(device))
    if executed.ran("int8_mm") == "int_mm":
        # Per-token int8 activations: about 1/127 of each row's range in rounding error.
        rel = float((out - ref).norm() / ref.norm())
        assert rel < 0.02, f"int_mm numerics: relative error {rel:.4f}"
    else:
        assert torch.allclose(out, ref, atol=1e-4, rtol=1e-4), "int8 linear numerics"
