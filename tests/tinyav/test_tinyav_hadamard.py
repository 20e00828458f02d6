"""The grouped regular Hadamard: orthonormal, symmetric, involutive, regular."""

from __future__ import annotations

import pytest
import torch
from tinyav.hadamard import applies, hadamard, rotate_grouped


@pytest.mark.parametrize("n", [4, 16, 64, 256])
def test_orthonormal_symmetric_involutive(n: int) -> None:
    h = hadamard(n, torch.float64)
    eye = torch.eye(n, dtype=torch.float64)
    assert torch.equal(h, h.T)
    assert torch.allclose(h @ h.T, eye, atol=1e-12)
    assert torch.allclose(h @ h, eye, atol=1e-12)  # its own inverse


def test_entries_and_regularity() -> None:
    h = hadamard(256, torch.float64)
    assert set(h.abs().unique().tolist()) == {1 / 16}
    # Kronecker power of a regular Hadamard: every row sums to the same value (2^4 / 16).
    assert torch.allclose(h.sum(dim=1), torch.full((256,), 1.0, dtype=torch.float64))
    h4 = hadamard(4, torch.float64) * 2
    assert h4.tolist() == [[1, 1, 1, -1], [1, 1, -1, 1], [1, -1, 1, 1], [-1, 1, 1, 1]]


def test_rotate_grouped_is_blockdiagonal_and_self_inverse() -> None:
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(8, 512, generator=gen, dtype=torch.float64)
    h = hadamard(256, torch.float64)
    block = torch.block_diag(h, h)
    assert torch.allclose(rotate_grouped(w), w @ block, atol=1e-12)
    assert torch.allclose(rotate_grouped(rotate_grouped(w)), w, atol=1e-12)


def test_bad_sizes() -> None:
    with pytest.raises(ValueError, match="power of 4"):
        hadamard(128)
    with pytest.raises(ValueError, match="multiple of the group size"):
        rotate_grouped(torch.zeros(2, 100))
    assert applies(256) and applies(1024) and not applies(32) and not applies(8)
