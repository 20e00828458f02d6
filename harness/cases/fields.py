"""The value checks shared by case tables and check tables: where an error is (:class:`Ctx`),
known keys and their types, frame selections, string lists, and values that must survive the
worker protocol's JSON unchanged."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.errors import CaseFileError
from harness.model.vocab import FRAME_MODES, FrameSpec


def type_ok(value: Any, types: tuple[type, ...]) -> bool:
    # bool is an int in Python; a TOML `true` must not pass for an integer.
    if isinstance(value, bool) and bool not in types:
        return False
    return isinstance(value, types)


class Ctx:
    """Where we are in a file, so every error can say so."""

    def __init__(self, path: Path, where: str) -> None:
        self.path = path
        self.where = where

    def fail(self, key: str, value: Any, expected: str) -> CaseFileError:
        return CaseFileError(
            self.path, f"{self.where}: key '{key}' = {value!r}: expected {expected}"
        )


def check_keys(
    ctx: Ctx, table: Mapping[str, Any], spec: Mapping[str, tuple[tuple[type, ...], str]]
) -> None:
    for key, value in table.items():
        if key not in spec:
            known = ", ".join(sorted(spec))
            raise CaseFileError(ctx.path, f"{ctx.where}: unknown key '{key}' (known keys: {known})")
        types, name = spec[key]
        if not type_ok(value, types):
            raise ctx.fail(key, value, f"{name}, got {type(value).__name__}")


def parse_frames(ctx: Ctx, key: str, value: Any) -> FrameSpec:
    if isinstance(value, str):
        if value not in FRAME_MODES:
            raise ctx.fail(key, value, '"first-mid-last", "all" or a list of integers')
        return value
    if not all(type_ok(v, (int,)) and v >= 0 for v in value):
        raise ctx.fail(key, value, "a list of non-negative integers")
    return tuple(value)


def str_list(ctx: Ctx, key: str, value: Any) -> tuple[str, ...]:
    if not all(isinstance(v, str) for v in value):
        raise ctx.fail(key, value, "a list of strings")
    return tuple(value)


def finite(value: Any) -> bool:
    return not isinstance(value, float) or math.isfinite(value)


NOT_FINITE = "a finite number (JSON cannot carry NaN or infinity to the worker)"


def check_json(ctx: Ctx, key: str, value: Any) -> None:
    """``value`` must reach the worker unchanged through the protocol's JSON: no TOML date or
    time (it would arrive as a string), no NaN or infinity (not JSON)."""
    if isinstance(value, dict):
        for k, v in value.items():
            check_json(ctx, f"{key}.{k}", v)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            check_json(ctx, f"{key}[{i}]", v)
    elif not finite(value):
        raise ctx.fail(key, value, NOT_FINITE)
    elif isinstance(value, dt.date | dt.time):  # a datetime is a date
        raise ctx.fail(
            key,
            value,
            "a string, number, boolean, array or table (a TOML date or time does not survive "
            "JSON to the worker: quote it as a string)",
        )
