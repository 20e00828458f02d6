"""Grouped regular-Hadamard rotation (ConvRot).

ConvRot folds a block-diagonal rotation into the stored INT8 weights: each group of 256 input
features is multiplied by ``H = H4^{⊗4} / 16`` where ``H4`` is the 4x4 *regular* Hadamard
matrix (all row sums equal). ``H`` is symmetric and orthonormal, hence its own inverse, so
derotating a weight is the very same grouped matmul as rotating it.
"""

from __future__ import annotations

import functools

import torch

GROUP_SIZE = 256

# The "regular" 4x4 Hadamard matrix: symmetric, rows sum to 2, H4 @ H4 == 4 I.
_H4 = ((1, 1, 1, -1), (1, 1, -1, 1), (1, -1, 1, 1), (-1, 1, 1, 1))


@functools.cache
def _hadamard_f64(n: int) -> torch.Tensor:
    if n < 4 or n & (n - 1) or (n.bit_length() - 1) % 2:
        raise ValueError(f"hadamard size must be a power of 4 (>= 4), got {n}")
    h4 = torch.tensor(_H4, dtype=torch.float64)
    h = h4
    while h.shape[0] < n:
        h = torch.kron(h, h4)
    # Every entry of H4^{⊗k} is ±1, so dividing by sqrt(n) is exact in binary for n = 4^k.
    return h / (n**0.5)


def hadamard(n: int = GROUP_SIZE, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The normalized regular Hadamard matrix of size ``n`` (a power of 4), e.g. 256.

    >>> h = hadamard(256); bool(torch.equal(h, h.T))
    True
    """
    return _hadamard_f64(n).to(dtype)


def applies(in_features: int, group: int = GROUP_SIZE) -> bool:
    """Whether ConvRot rotation applies to a layer with ``in_features`` inputs."""
    return in_features > 0 and in_features % group == 0


def rotate_grouped(x: torch.Tensor, group: int = GROUP_SIZE) -> torch.Tensor:
    """Multiply the last dimension of ``x``, group by group, by the Hadamard matrix.

    Works for weights ``[out, in]`` (rotating, and equally derotating, stored weights) and for
    activations ``[..., in]``. The computation runs in float32 at least, returns ``x.dtype``.
    """
    n = x.shape[-1]
    if n % group:
        raise ValueError(f"last dimension {n} is not a multiple of the group size {group}")
    work = x.to(torch.float32) if x.dtype in (torch.float16, torch.bfloat16) else x
    h = hadamard(group, work.dtype).to(work.device)
    out = (work.reshape(*x.shape[:-1], n // group, group) @ h).reshape(x.shape)
    return out.to(x.dtype)
