"""The one error tree of tinyav.

::

    TinyAVError
    ├── CheckpointError            a checkpoint file cannot be used (names file, layer, format)
    │   ├── CorruptCheckpointError     truncated, bad header, byte range, marker not JSON
    │   ├── UnsupportedFormatError     serialized format no backend handles (nvfp4, mxfp8, ...)
    │   ├── MissingTensorError         a marker without its weight or scale tensors
    │   └── QuantConfigConflictError   runtime quantization disagrees with the serialized one
    ├── RegistryError              quantization backend registry misuse (unknown, duplicate)
    ├── DispatchError              a kernel path handed tensors of the wrong platform
    └── ExportError                an output cannot be encoded (e.g. non-finite audio)
"""

from __future__ import annotations

import os


class TinyAVError(Exception):
    """Root of every error tinyav raises on purpose."""


class CheckpointError(TinyAVError):
    """A checkpoint cannot be loaded; the message names the file, and the layer/format if known."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        reason: str,
        *,
        layer: str | None = None,
        fmt: str | None = None,
    ) -> None:
        self.path = str(path)
        self.reason = reason
        self.layer = layer
        self.fmt = fmt
        where = [f"file {self.path!r}"]
        if layer is not None:
            where.append(f"layer {layer!r}")
        if fmt is not None:
            where.append(f"format {fmt!r}")
        super().__init__(f"{', '.join(where)}: {reason}")


class CorruptCheckpointError(CheckpointError):
    """The file is not a well-formed safetensors file (or a marker is malformed)."""


class UnsupportedFormatError(CheckpointError):
    """A layer declares a serialized quantization format that no backend supports."""


class MissingTensorError(CheckpointError):
    """A quantized layer lacks a tensor its format requires (weight, weight_scale, ...)."""


class QuantConfigConflictError(CheckpointError):
    """The runtime quantization setting conflicts with what the file serializes."""


class RegistryError(TinyAVError, KeyError):
    """Unknown or duplicate quantization backend name."""

    def __str__(self) -> str:  # KeyError would repr() the message; keep it readable
        return str(self.args[0]) if self.args else ""


class DispatchError(TinyAVError):
    """A platform-specific kernel path was given tensors it must never see."""


class ExportError(TinyAVError):
    """Outputs cannot be written (non-finite samples, wrong shape or dtype)."""
