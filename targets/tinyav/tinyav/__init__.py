"""tinyav: a miniature text/reference-to-video+audio DiT stack, the harness's bundled target.

Deliberately import-light: importing ``tinyav`` (or ``tinyav.quant``) does not import torch or
any quantization backend, so cold-import cases can check exactly what a lookup pulls in.

Modules, one idea each:

- ``hadamard``: the grouped regular-Hadamard rotation used by ConvRot.
- ``model``: the DiT (full and pruned variants), text encoder, video/audio codecs.
- ``checkpoint``: deterministic single-file safetensors writer (bf16, INT8 ConvRot, FP8).
- ``header``: safetensors header parsing and validation (no tensor data read).
- ``loader``: header-first validating loader that builds quantized modules.
- ``quant``: lazily resolved quantization backend registry.
- ``fp8``: float8 flavours and the e4m3fn -> e4m3fnuz normalization.
- ``dispatch``: per-platform kernel path selection.
- ``media``: MP4/WAV writing and reference decoding (PyAV).
- ``pipeline``: the staged text/reference-to-video+audio pipeline.
- ``scenarios``: the functions the harness's case files call, one module per case kind
  (``scenarios.pipeline``, ``scenarios.loader``, ``scenarios.quant``, ``scenarios.imports``);
  its ``__init__`` is empty, so importing it imports nothing.
"""

__version__ = "0.1.0"
