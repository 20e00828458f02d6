"""Quantization backend registry, resolved lazily by name.

Importing ``tinyav.quant`` imports no backend module (and not torch): a backend module is
imported on its first lookup, and only that one. The package-level exports of the config and
module classes are kept, resolved on first attribute access through module ``__getattr__``::

    from tinyav.quant import ConvRotInt8Config      # imports tinyav.quant.convrot_int8 only
    cfg_cls = get_quantization_config("kitchen_int8")  # alias of "convrot_int8"

Custom backends register a :class:`QuantizationConfig` subclass under a new name.
"""

from __future__ import annotations

import importlib
from typing import Any

from tinyav.errors import RegistryError
from tinyav.quant.base import QuantizationConfig

__all__ = [
    "ConvRotInt8Config",
    "Fp8Config",
    "Fp8Linear",
    "Int8ConvRotLinear",
    "QuantizationConfig",
    "available_backends",
    "backend_for_format",
    "canonical_name",
    "get_quantization_config",
    "register_quantization_config",
]

# Built-in backend name -> (module, export name). Data only: nothing is imported until lookup.
_BUILTIN: dict[str, tuple[str, str]] = {
    "convrot_int8": ("tinyav.quant.convrot_int8", "ConvRotInt8Config"),
    "fp8": ("tinyav.quant.fp8_scaled", "Fp8Config"),
}
# Deprecated names kept working.
_ALIASES: dict[str, str] = {"kitchen_int8": "convrot_int8"}
# Serialized ``comfy_quant`` format -> built-in backend that loads it.
_FORMATS: dict[str, str] = {"int8_tensorwise": "convrot_int8", "float8_e4m3fn": "fp8"}
# Package-level exports resolved on first access.
_EXPORTS: dict[str, str] = {
    "ConvRotInt8Config": "tinyav.quant.convrot_int8",
    "Int8ConvRotLinear": "tinyav.quant.convrot_int8",
    "Fp8Config": "tinyav.quant.fp8_scaled",
    "Fp8Linear": "tinyav.quant.fp8_scaled",
}
_custom: dict[str, type[QuantizationConfig]] = {}
_resolved: dict[str, type[QuantizationConfig]] = {}


def available_backends() -> list[str]:
    """Every registered backend name (built-in and custom), aliases excluded, sorted."""
    return sorted({*_BUILTIN, *_custom})


def canonical_name(name: str) -> str:
    """``name`` with aliases resolved; raises :class:`RegistryError` if unknown."""
    target = _ALIASES.get(name, name)
    if target not in _BUILTIN and target not in _custom:
        known = ", ".join([*available_backends(), *(f"{a} (alias)" for a in sorted(_ALIASES))])
        raise RegistryError(f"unknown quantization backend {name!r}; known: {known}")
    return target


def get_quantization_config(name: str) -> type[QuantizationConfig]:
    """The config class of backend ``name`` (or an alias); imports only that backend."""
    target = canonical_name(name)
    if target in _custom:
        return _custom[target]
    if target not in _resolved:
        module_name, export = _BUILTIN[target]
        _resolved[target] = getattr(importlib.import_module(module_name), export)
    return _resolved[target]


def backend_for_format(fmt: str) -> str | None:
    """The backend that loads serialized format ``fmt``, or None if unsupported (no import)."""
    if fmt in _FORMATS:
        return _FORMATS[fmt]
    for name, cls in _custom.items():
        if cls.serialized_format == fmt:
            return name
    return None


def register_quantization_config(
    name: str, cls: type[QuantizationConfig]
) -> type[QuantizationConfig]:
    """Register a custom backend; a duplicate name (built-in, alias or custom) is an error."""
    if not isinstance(name, str) or not name:
        raise RegistryError(f"backend name must be a non-empty str, got {name!r}")
    if not (isinstance(cls, type) and issubclass(cls, QuantizationConfig)):
        raise RegistryError(
            f"backend {name!r}: expected a QuantizationConfig subclass, got {cls!r}"
        )
    if name in _BUILTIN or name in _ALIASES or name in _custom:
        raise RegistryError(f"quantization backend {name!r} is already registered")
    _custom[name] = cls
    return cls


def _unregister(name: str) -> None:
    """Remove a custom backend (tests only)."""
    _custom.pop(name, None)


def __getattr__(name: str) -> Any:
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'tinyav.quant' has no attribute {name!r}")
    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value  # cache: later accesses skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
