"""Layer samples: the small tensor a layered reference keeps of each fingerprinted intermediate.

A fingerprint says *whether* a tensor changed (its hash) and roughly how (min/max/mean); a
layered reference also says *how far*, layer by layer, so it keeps values. A tensor of up to
:data:`WHOLE_MAX` elements is kept whole; a larger one keeps :data:`SAMPLE_N` of its elements at
deterministic positions (:func:`sample_indices`), beside the fingerprint's statistics of the
whole tensor. Values are float32 (bf16/fp16/fp8 widen exactly; float64 loses digits far below
any tolerance a layer is judged by).

Why 256: the bundled suite records 13 layers per pipeline case; 256 float32 values per layer
are ~14 KB a reference, ~5 % on top of the bundled store (the issue's bound is 10 %; figures in
docs/benchmarks.md). The relative L2 of a stratified sample of 256 values estimates the whole
tensor's within roughly +-10 % for a drift spread over the tensor, which is what a tolerance
of the order 1e-3 needs; a drift confined to a few elements can escape the sample, and then
the hash (the layer is not identical) and the statistics still tell.

Positions are stratified (one per 1/256 of the flattened tensor) with an integer-hash jitter
inside each stratum, so a stride that matches the tensor's layout (every 768th value of a
[16, 64, 64, 3] video is channel 0 of column 0) cannot alias; pure integer arithmetic, so a
reference blessed with one numpy reads the same positions with any other.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

__all__ = ["RULE", "SAMPLE_N", "WHOLE_MAX", "layer_sample", "sample_indices"]

WHOLE_MAX = 256
SAMPLE_N = 256
# Names the rule in the files it wrote, so a later harness with another rule never compares
# samples taken at different positions.
RULE = f"whole<={WHOLE_MAX};stratified-knuth:{SAMPLE_N}"

_KNUTH = 2654435761  # Knuth's multiplicative hash constant (2^32 / golden ratio)


@functools.lru_cache(maxsize=256)
def sample_indices(numel: int, n: int = SAMPLE_N) -> tuple[int, ...]:
    """``n`` positions in ``range(numel)``, increasing, one per stratum of ``numel / n`` (the
    same tensor shapes recur in every attempt: computed once per size).

    >>> sample_indices(10, 4)
    (1, 3, 6, 9)
    >>> len(set(sample_indices(196608)))
    256
    """
    out = []
    for i in range(n):
        start, stop = i * numel // n, (i + 1) * numel // n
        width = max(1, stop - start)
        out.append(start + ((i + 1) * _KNUTH % (1 << 32)) % width)
    return tuple(out)


def layer_sample(x: Any) -> Any:
    """What a layered reference keeps of tensor or array ``x``: float32, whole (its own shape)
    up to :data:`WHOLE_MAX` elements, else :data:`SAMPLE_N` values (1-D) at
    :func:`sample_indices`. None for anything that is not a real-valued tensor or array
    (complex, object, a list): such a layer is compared by hash alone."""
    import numpy as np

    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        t = x.detach()
        if t.is_complex() or t.layout is not torch.strided or t.dtype == torch.bool:
            return None
        if t.numel() > WHOLE_MAX:
            idx = torch.tensor(sample_indices(t.numel()), device=t.device, dtype=torch.long)
            t = t.reshape(-1).index_select(0, idx)
        return t.to("cpu", torch.float32).numpy()
    if not isinstance(x, np.ndarray) or x.dtype.kind not in "biuf" or x.dtype.kind == "b":
        return None
    if x.size > WHOLE_MAX:
        x = x.reshape(-1)[list(sample_indices(x.size))]
    return np.array(x, dtype=np.float32)
