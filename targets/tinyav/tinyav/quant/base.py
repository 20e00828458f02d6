"""The backend-independent base of quantization configs (no torch import here).

Kept separate from the backends so ``tinyav.quant`` can expose it during package
initialization: backends import it back from the package without an import cycle.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar


class QuantizationConfig:
    """A runtime quantization setting for one backend.

    Subclasses declare the backend ``name`` and the ``serialized_format`` that their per-layer
    ``comfy_quant`` markers carry, build their linear modules, and say whether a serialized
    marker agrees with this runtime setting.
    """

    name: ClassVar[str] = ""
    serialized_format: ClassVar[str] = ""
    # Tensors a serialized layer of this format must carry besides the marker.
    required_tensors: ClassVar[tuple[str, ...]] = ("weight",)

    @classmethod
    def from_marker(cls, marker: Mapping[str, Any]) -> QuantizationConfig:
        """The config a serialized marker describes."""
        return cls()

    def conflict(self, marker: Mapping[str, Any]) -> str | None:
        """Why this runtime setting cannot load a layer serialized with ``marker``, or None."""
        fmt = marker.get("format")
        if fmt != self.serialized_format:
            return (
                f"runtime quantization {self.name!r} expects serialized format "
                f"{self.serialized_format!r}, the file has {fmt!r}"
            )
        return None

    def make_linear(
        self, in_features: int, out_features: int, bias: bool, marker: Mapping[str, Any]
    ) -> Any:
        """An empty module with the storage layout of a serialized layer."""
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and vars(self) == vars(other)

    def __hash__(self) -> int:
        return hash((type(self), tuple(sorted(vars(self).items()))))

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in sorted(vars(self).items()))
        return f"{type(self).__name__}({args})"
