"""Platform policy tables, validated: the packaged defaults (``policy.toml``) and a runner
profile's ``[policy]`` table, each flattened into ``{"latency.on_fail": "warn", ...}`` with
errors that name the file and the key. :mod:`harness.platforms.policy` resolves them."""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any, Literal

from harness.errors import ProfileError
from harness.model.vocab import PLATFORMS, QUALITY_METRICS

DEFAULTS_PATH = Path(__file__).with_name("policy.toml")
OnFail = Literal["fail", "warn", "skip"]
ON_FAIL: tuple[str, ...] = ("fail", "warn", "skip")
# What a server case's readiness timeout earns (harness.execution.retry.readiness_decision).
READINESS_RETRY: tuple[str, ...] = ("never", "once_if_logs_growing")
DEFAULT = "default"
_CLASS = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")
MAX_SCALE = 100.0
MAX_REL = 10.0


# --- validation: one table of one file ----------------------------------------------------------


def _bad(path: str, key: str, value: Any, expected: str) -> ProfileError:
    return ProfileError(f"{path}: key '{key}' = {value!r}: expected {expected}")


def _number(path: str, key: str, value: Any, lo: float, hi: float, *, open_lo: bool) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    low = f"above {lo:g}" if open_lo else f"from {lo:g}"
    if not ok or not (value > lo if open_lo else value >= lo) or value > hi:
        raise _bad(path, key, value, f"a finite number {low} up to {hi:g}")
    return float(value)


def _strings(path: str, key: str, value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _bad(path, key, value, "a list of strings")
    return list(value)


def _latency(path: str, key: str, table: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in table.items():
        full = f"{key}.{k}"
        if k == "on_fail":
            if v not in ON_FAIL:
                raise _bad(path, full, v, 'one of "fail", "warn", "skip"')
            out[k] = v
        elif k == "rel_tolerance":
            out[k] = _number(path, full, v, 0.0, MAX_REL, open_lo=False)
        elif k == "abs_floor_s":
            out[k] = _number(path, full, v, 0.0, 3600.0, open_lo=False)
        else:
            raise ProfileError(
                f"{path}: unknown key '{full}' (known: on_fail, rel_tolerance, abs_floor_s)"
            )
    return out


def _quality(path: str, key: str, table: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in table.items():
        if k not in QUALITY_METRICS:
            raise ProfileError(
                f"{path}: unknown key '{key}.{k}': expected a quality metric "
                f"({', '.join(QUALITY_METRICS)})"
            )
        out[k] = _number(path, f"{key}.{k}", v, -math.inf, math.inf, open_lo=True)
    return out


def _references(path: str, key: str, table: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in table.items():
        if k != "fallback":
            raise ProfileError(f"{path}: unknown key '{key}.{k}' (known: fallback)")
        classes = _strings(path, f"{key}.{k}", v)
        for c in classes:
            if not _CLASS.fullmatch(c):
                raise _bad(path, f"{key}.{k}", v, "platform class names (one path segment each)")
        out[k] = classes
    return out


def _layers(path: str, key: str, table: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in table.items():
        if k == "rel_l2":
            out[k] = _number(path, f"{key}.{k}", v, 0.0, MAX_REL, open_lo=False)
        elif k == "rel_l2_for":
            if not isinstance(v, dict):
                raise _bad(
                    path, f"{key}.{k}", v, 'a table of layer-name globs, e.g. {"video.*" = 0.02}'
                )
            out[k] = {
                str(glob): _number(path, f"{key}.{k}.{glob}", t, 0.0, MAX_REL, open_lo=False)
                for glob, t in v.items()
            }
        else:
            raise ProfileError(f"{path}: unknown key '{key}.{k}' (known: rel_l2, rel_l2_for)")
    return out


def _timeouts(path: str, key: str, table: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in table.items():
        if k == "attempt_scale":
            out[k] = _number(path, f"{key}.{k}", v, 0.0, MAX_SCALE, open_lo=True)
        elif k == "worker_start_s":
            out[k] = _number(path, f"{key}.{k}", v, 0.0, 3600.0, open_lo=True)
        else:
            raise ProfileError(
                f"{path}: unknown key '{key}.{k}' (known: attempt_scale, worker_start_s)"
            )
    return out


def _retry(path: str, key: str, table: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in table.items():
        if k == "readiness_timeout":
            if v not in READINESS_RETRY:
                raise _bad(path, f"{key}.{k}", v, 'one of "never", "once_if_logs_growing"')
            out[k] = v
            continue
        if k != "patterns":
            raise ProfileError(
                f"{path}: unknown key '{key}.{k}' (known: patterns, readiness_timeout)"
            )
        pats = _strings(path, f"{key}.{k}", v)
        for pat in pats:
            try:
                re.compile(pat)
            except re.error as exc:
                raise _bad(path, f"{key}.{k}", pat, f"a regular expression ({exc})") from exc
        out[k] = pats
    return out


_SECTIONS = {
    "latency": _latency,
    "quality": _quality,
    "references": _references,
    "layers": _layers,
    "timeouts": _timeouts,
    "retry": _retry,
}


def validate_table(path: str | Path, prefix: str, table: Any) -> dict[str, Any]:
    """One policy table (``[policy]`` of a profile, ``[hip]`` of policy.toml), validated into
    flat settings ``{"latency.on_fail": "warn", ...}``; errors name the file and the key."""
    path = str(path)
    if not isinstance(table, dict):
        raise _bad(path, prefix, table, "a table")
    flat: dict[str, Any] = {}
    for section, body in table.items():
        key = f"{prefix}.{section}" if prefix else section
        check = _SECTIONS.get(section)
        if check is None:
            raise ProfileError(f"{path}: unknown key '{key}' (known sections: {sorted(_SECTIONS)})")
        if not isinstance(body, dict):
            raise _bad(path, key, body, "a table")
        for k, v in check(path, key, body).items():
            flat[f"{section}.{k}"] = v
    return flat


def load_defaults(path: Path) -> dict[str, dict[str, Any]]:
    """A policy defaults file: ``[default]`` and one table per platform, each validated."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"{path}: not valid TOML: {exc}") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ProfileError(f"{path}: cannot read platform policy: {exc}") from exc
    out: dict[str, dict[str, Any]] = {}
    for name, table in data.items():
        if name != DEFAULT and name not in PLATFORMS:
            raise ProfileError(
                f"{path}: unknown key '{name}': expected 'default' or a platform "
                f"({', '.join(PLATFORMS)})"
            )
        out[name] = validate_table(path, name, table)
    missing = [k for k in _REQUIRED if k not in out.get(DEFAULT, {})]
    if missing:
        raise ProfileError(f"{path}: [default] must set {missing}")
    return out


@cache
def packaged_defaults() -> dict[str, dict[str, Any]]:
    return load_defaults(DEFAULTS_PATH)


_REQUIRED = (
    "latency.on_fail",
    "latency.rel_tolerance",
    "latency.abs_floor_s",
    "references.fallback",
    "layers.rel_l2",
    "timeouts.attempt_scale",
    "timeouts.worker_start_s",
    "retry.patterns",
    "retry.readiness_timeout",
)
