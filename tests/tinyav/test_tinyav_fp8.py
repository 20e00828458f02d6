"""e4m3fn -> e4m3fnuz normalization: exact values, negative zero, doubled scales, clamping."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tinyav.fp8 import FN, FNUZ, cast_to_fp8, fp8_dtype_for, normalize_e4m3fn_to_e4m3fnuz
from tinyav.scenarios import quant as quant_scenarios


def test_scenario_on_real_checkpoint(tmp_path: Path) -> None:
    quant_scenarios.fp8_normalize_exact(workdir=str(tmp_path))


def test_negative_zero_maps_to_zero() -> None:
    w = torch.tensor([-0.0, 0.0, 1.0, -2.0]).to(FN)
    assert w.view(torch.uint8)[0] == 0x80
    q, s, x = normalize_e4m3fn_to_e4m3fnuz(w, torch.tensor(0.5), torch.tensor(0.25))
    assert q.dtype == FNUZ
    assert q.view(torch.uint8).tolist()[:2] == [0, 0]
    vals = q.to(torch.float32) * s
    assert torch.isfinite(vals).all()
    assert vals.tolist() == [0.0, 0.0, 0.5, -1.0]
    assert float(s) == 1.0 and x is not None and float(x) == 0.5


def test_bits_are_reinterpreted_not_converted() -> None:
    w = torch.tensor([448.0, -448.0, 0.015625]).to(FN)
    q, _, _ = normalize_e4m3fn_to_e4m3fnuz(w, torch.tensor(1.0))
    assert torch.equal(q.view(torch.uint8), w.view(torch.uint8))
    assert q.to(torch.float32).tolist() == [224.0, -224.0, 0.0078125]  # same bits, half value


def test_requires_e4m3fn() -> None:
    with pytest.raises(TypeError, match="float8_e4m3fn"):
        normalize_e4m3fn_to_e4m3fnuz(torch.zeros(2).to(FNUZ), torch.tensor(1.0))


def test_clamp_before_cast() -> None:
    big = torch.tensor([1e6, -1e6, 300.0, 239.0])
    assert torch.isnan(big.to(FNUZ).to(torch.float32)).any()  # the hazard being guarded
    out = cast_to_fp8(big, FNUZ).to(torch.float32)
    assert out.tolist() == [240.0, -240.0, 240.0, 240.0]
    assert cast_to_fp8(big, FN).to(torch.float32).tolist()[:2] == [448.0, -448.0]


@pytest.mark.parametrize(
    ("platform", "arch", "want"),
    [
        ("hip", None, FNUZ),
        ("hip", "gfx942:sramecc+:xnack-", FNUZ),
        ("hip", "gfx950", FN),
        ("cuda", None, FN),
        ("cpu", None, FN),
        ("npu", None, FN),
    ],
)
def test_flavour_by_platform(platform: str, arch: str | None, want: torch.dtype) -> None:
    assert fp8_dtype_for(platform, arch) == want
