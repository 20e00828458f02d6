"""A quantized layer's dequantized weight, kept between forwards while its stored tensors stay
as they are.

The stored tensors are the truth: the cache is keyed by the very tensor objects the weight was
computed from, at their in-place version (``Tensor._version``, bumped by every in-place write
such as ``load_state_dict``'s copy), by the compute dtype, and by whether inference mode was
on (a weight made under ``torch.inference_mode`` cannot take part in a later forward that
autograd records). Replacing a buffer (``.to()``,
the FP8 flavour normalization) or writing into one recomputes on the next forward; the bits are
those a per-forward dequantization gives, since the computation is the same.

Why keep it: at this size the ConvRot derotation (a 256-wide grouped matmul over every rotated
weight) costs more than the layer's own matmul, and the harness's own tests run these
pipelines hundreds of times. Layerwise offload turns it off (``enabled = False``): its point is
to hold no weight on the device between a block's forwards.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


class DequantCache:
    """One dequantized weight and what it was computed from."""

    __slots__ = ("_dtype", "_inference", "_sources", "_value", "_versions", "enabled")

    def __init__(self) -> None:
        self.enabled = True
        self._sources: tuple[torch.Tensor, ...] = ()
        self._versions: tuple[int, ...] = ()
        self._dtype: torch.dtype | None = None
        self._inference = False
        self._value: torch.Tensor | None = None

    def get(
        self,
        sources: tuple[torch.Tensor, ...],
        dtype: torch.dtype,
        compute: Callable[[], torch.Tensor],
    ) -> torch.Tensor:
        """The dequantized weight for ``sources`` in ``dtype``: the kept one when the same
        tensors, unchanged, gave it in that dtype, else ``compute()`` (kept when enabled)."""
        if not self.enabled:
            self.clear()
            return compute()
        versions = tuple(t._version for t in sources)
        inference = torch.is_inference_mode_enabled()
        if (
            self._value is not None
            and self._dtype == dtype
            and self._inference == inference
            and len(sources) == len(self._sources)
            and all(a is b for a, b in zip(sources, self._sources, strict=True))
            and versions == self._versions
        ):
            return self._value
        value = compute()
        self._sources, self._versions, self._dtype, self._value = sources, versions, dtype, value
        self._inference = inference
        return value

    def clear(self) -> None:
        """Forget the kept weight (and the references to what it came from)."""
        self._sources, self._versions, self._dtype, self._value = (), (), None, None
