"""INT8 ConvRot quantize/dequantize against a plain reference quantizer written here."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tinyav.quant.convrot_int8 import dequantize_weight, quantize_weight


def _reference_hadamard(n: int) -> np.ndarray:
    h4 = np.array([[1, 1, 1, -1], [1, 1, -1, 1], [1, -1, 1, 1], [-1, 1, 1, 1]], dtype=np.float64)
    h = h4
    while h.shape[0] < n:
        h = np.kron(h, h4)
    return h / np.sqrt(n)


def _reference_quantize(w: np.ndarray, rotate: bool) -> tuple[np.ndarray, np.ndarray]:
    """Textbook per-row symmetric int8, after an explicit block-diagonal rotation."""
    if rotate:
        h = _reference_hadamard(256)
        blocks = [w[:, i : i + 256] @ h for i in range(0, w.shape[1], 256)]
        w = np.concatenate(blocks, axis=1)
    scale = np.maximum(np.abs(w).max(axis=1, keepdims=True), 1e-12) / 127.0
    q = np.clip(np.rint(w / scale), -127, 127).astype(np.int8)
    return q, scale


@pytest.mark.parametrize(
    ("shape", "rotate"), [((64, 256), True), ((32, 1024), True), ((48, 32), False)]
)
def test_matches_reference_quantizer(shape: tuple[int, int], rotate: bool) -> None:
    gen = torch.Generator().manual_seed(1)
    w = torch.randn(shape, generator=gen) / 16
    q, s = quantize_weight(w, convrot=rotate)
    q_ref, s_ref = _reference_quantize(w.double().numpy(), rotate)
    assert q.dtype == torch.int8 and s.dtype == torch.float32 and s.shape == (shape[0], 1)
    np.testing.assert_allclose(s.numpy(), s_ref, rtol=1e-6)
    # float32 vs float64 rotation may flip a value sitting exactly on a rounding boundary.
    diff = np.abs(q.numpy().astype(int) - q_ref.astype(int))
    assert diff.max() <= 1 and (diff > 0).mean() < 1e-3


@pytest.mark.parametrize("rotate", [True, False])
def test_round_trip_error_is_bounded(rotate: bool) -> None:
    gen = torch.Generator().manual_seed(2)
    w = torch.randn(64, 512, generator=gen) / 16
    q, s = quantize_weight(w, convrot=rotate)
    back = dequantize_weight(q, s, convrot=rotate)
    # Rotation is orthonormal, so the per-row error bound (scale / 2 per entry) carries over in
    # the L2 norm: ||back - w||_row <= sqrt(in) * scale / 2.
    err = (back - w).norm(dim=1)
    bound = (512**0.5) * s.squeeze(1) / 2 + 1e-6
    assert bool((err <= bound).all())
    assert float((back - w).abs().mean()) < 0.01 * float(w.abs().mean()) * 10


def test_rotation_spreads_outliers() -> None:
    # Why ConvRot exists: one outlier column ruins per-row int8 unless rotated away.
    gen = torch.Generator().manual_seed(3)
    w = torch.randn(64, 256, generator=gen) / 16
    w[:, 7] = 20.0
    plain = (dequantize_weight(*quantize_weight(w, convrot=False), convrot=False) - w).abs().mean()
    rot = (dequantize_weight(*quantize_weight(w, convrot=True), convrot=True) - w).abs().mean()
    assert rot < plain / 3
