"""Case files: TOML in, validated frozen :class:`Case` records out.

A file holds one case (top-level keys) or several (``[[case]]`` tables). Every problem is an
error that names the file, the case, the key, the value and what was expected; unknown keys are
errors; ids are unique across the suite, and a duplicate names both files.

Values are checked for what the run will do with them, so that none that loads can crash the
run or make a check pass that could never fail: ids and reference ids are one safe path segment;
``platforms`` and ``thresholds`` keys are known platform names; a check's metric is known and its
threshold has the type its metric and op need; ``params`` and ``settings`` survive the worker
protocol's JSON unchanged (no dates, no NaN or infinity); ``repeats`` <= 1000, ``warmup`` <= 100,
``retries`` <= 10, ``timeout_s`` at most 24 h and every number finite.

Example::

    [[case]]
    id = "t2va-int8"
    kind = "pipeline"
    target = "tinyav.scenarios.pipeline:t2va"
    params = { quant = "int8", steps = 4 }
    seed = 42
    repeats = 2

    [[case.checks]]
    metric = "ssim"
    output = "video"
    op = ">="
    threshold = 0.98
    thresholds = { hip = 0.95 }
"""

from __future__ import annotations

import datetime as dt
import keyword
import math
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from harness.errors import CaseFileError
from harness.model.case import Case, CheckSpec
from harness.model.vocab import (
    CASE_LEVEL_METRICS,
    FRAME_MODES,
    KINDS,
    MAX_REPEATS,
    MAX_RETRIES,
    MAX_TIMEOUT_S,
    MAX_WARMUP,
    NOTE_PREFIX,
    OPS,
    ORDERING_OPS,
    PLATFORMS,
    POLICIES,
    QUALITY_METRICS,
    FrameSpec,
)

# Ids name files and folders (outputs, references): one path segment, never hidden, never
# "." or "..", so no two ids share a file and none resolves outside its store.
_ID = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")
_ID_EXPECTED = "letters, digits, '.', '_' or '-', not starting with '.'"
_COUNTS = {"repeats": (1, MAX_REPEATS), "warmup": (0, MAX_WARMUP), "retries": (0, MAX_RETRIES)}
_KNOWN_METRICS = ", ".join((*QUALITY_METRICS, *CASE_LEVEL_METRICS, f"{NOTE_PREFIX}<key>"))

# key -> (expected type(s), human name of the type)
_CASE_KEYS: dict[str, tuple[tuple[type, ...], str]] = {
    "id": ((str,), "string"),
    "kind": ((str,), "string"),
    "target": ((str,), 'string "module:function"'),
    "command": ((list,), "list of strings"),
    "params": ((dict,), "table"),
    "seed": ((int,), "integer"),
    "platforms": ((list, str), 'list of strings or "any"'),
    "repeats": ((int,), "integer"),
    "retries": ((int,), "integer"),
    "warmup": ((int,), "integer"),
    "timeout_s": ((int, float), "number"),
    "fresh_process": ((bool,), "boolean"),
    "checks": ((list,), "array of tables"),
    "reference": ((str,), "string"),
    "frames": ((str, list), '"first-mid-last", "all" or a list of integers'),
    "budget": ((dict,), "table of stage = seconds"),
    "description": ((str,), "string"),
    "tags": ((list,), "list of strings"),
    "code_root": ((str,), "string (a folder relative to the repository root)"),
    "requires": ((list,), "list of module names"),
}
_CHECK_KEYS: dict[str, tuple[tuple[type, ...], str]] = {
    "metric": ((str,), "string"),
    "op": ((str,), "one of " + ", ".join(OPS)),
    "threshold": ((int, float, str, bool), "number, string or boolean"),
    "thresholds": ((dict,), "table of platform = threshold"),
    "policy": ((str,), '"fail" or "warn"'),
    "output": ((str,), "string"),
    "frames": ((str, list), '"first-mid-last", "all" or a list of integers'),
    "reduce": ((str,), '"worst" or "mean"'),
    "name": ((str,), "string"),
    "settings": ((dict,), "table"),
}


def _type_ok(value: Any, types: tuple[type, ...]) -> bool:
    # bool is an int in Python; a TOML `true` must not pass for an integer.
    if isinstance(value, bool) and bool not in types:
        return False
    return isinstance(value, types)


class _Ctx:
    """Where we are in a file, so every error can say so."""

    def __init__(self, path: Path, where: str) -> None:
        self.path = path
        self.where = where

    def fail(self, key: str, value: Any, expected: str) -> CaseFileError:
        return CaseFileError(
            self.path, f"{self.where}: key '{key}' = {value!r}: expected {expected}"
        )


def _check_keys(
    ctx: _Ctx, table: Mapping[str, Any], spec: Mapping[str, tuple[tuple[type, ...], str]]
) -> None:
    for key, value in table.items():
        if key not in spec:
            known = ", ".join(sorted(spec))
            raise CaseFileError(ctx.path, f"{ctx.where}: unknown key '{key}' (known keys: {known})")
        types, name = spec[key]
        if not _type_ok(value, types):
            raise ctx.fail(key, value, f"{name}, got {type(value).__name__}")


def _frames(ctx: _Ctx, key: str, value: Any) -> FrameSpec:
    if isinstance(value, str):
        if value not in FRAME_MODES:
            raise ctx.fail(key, value, '"first-mid-last", "all" or a list of integers')
        return value
    if not all(_type_ok(v, (int,)) and v >= 0 for v in value):
        raise ctx.fail(key, value, "a list of non-negative integers")
    return tuple(value)


def _str_list(ctx: _Ctx, key: str, value: Any) -> tuple[str, ...]:
    if not all(isinstance(v, str) for v in value):
        raise ctx.fail(key, value, "a list of strings")
    return tuple(value)


def _finite(value: Any) -> bool:
    return not isinstance(value, float) or math.isfinite(value)


_NOT_FINITE = "a finite number (JSON cannot carry NaN or infinity to the worker)"


def _check_json(ctx: _Ctx, key: str, value: Any) -> None:
    """``value`` must reach the worker unchanged through the protocol's JSON: no TOML date or
    time (it would arrive as a string), no NaN or infinity (not JSON)."""
    if isinstance(value, dict):
        for k, v in value.items():
            _check_json(ctx, f"{key}.{k}", v)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _check_json(ctx, f"{key}[{i}]", v)
    elif not _finite(value):
        raise ctx.fail(key, value, _NOT_FINITE)
    elif isinstance(value, dt.date | dt.time):  # a datetime is a date
        raise ctx.fail(
            key,
            value,
            "a string, number, boolean, array or table (a TOML date or time does not survive "
            "JSON to the worker: quote it as a string)",
        )


def _is_name(text: str) -> bool:
    return text.isidentifier() and not keyword.iskeyword(text)


def _target_ok(target: str) -> bool:
    """``module.path:function``: the worker imports the module and takes the attribute."""
    module, colon, function = target.partition(":")
    return bool(colon) and all(map(_is_name, module.split("."))) and _is_name(function)


def _code_root(ctx: _Ctx, value: str) -> str:
    """A relative folder inside the repository: no absolute path, no '..', no backslash."""
    parts = value.removesuffix("/").split("/")
    if not value or value.startswith("/") or "\\" in value or ".." in parts or "" in parts:
        raise ctx.fail(
            "code_root",
            value,
            "a folder relative to the repository root, with '/' separators and no '..' "
            '(e.g. "targets/diffusers_scenarios")',
        )
    return "/".join(p for p in parts if p != ".") or "."


def _requires(ctx: _Ctx, value: list[Any]) -> tuple[str, ...]:
    names = _str_list(ctx, "requires", value)
    bad = [n for n in names if not all(map(_is_name, n.split(".")))]
    if bad:
        raise ctx.fail("requires", value, f"importable module names (dotted); not names: {bad}")
    return names


def _metric(ctx: _Ctx, metric: str) -> None:
    if metric in QUALITY_METRICS or metric in CASE_LEVEL_METRICS:
        return
    if metric.startswith(NOTE_PREFIX) and metric != NOTE_PREFIX:
        return
    raise ctx.fail("metric", metric, f"one of {_KNOWN_METRICS}")


def _threshold(ctx: _Ctx, key: str, metric: str, op: str, value: Any) -> None:
    """The threshold has the type the metric and the op need, so a check can ever pass."""
    if not _type_ok(value, (int, float, str, bool)):
        raise ctx.fail(key, value, f"a number, string or boolean, got {type(value).__name__}")
    number = _type_ok(value, (int, float))
    if not _finite(value):
        raise ctx.fail(key, value, _NOT_FINITE)
    if metric in CASE_LEVEL_METRICS:
        if op not in ("==", "!="):
            raise ctx.fail("op", op, f"'==' or '!=' for {metric} (its value is true or false)")
        if not isinstance(value, bool):
            raise ctx.fail(key, value, f"true or false for {metric}, got {type(value).__name__}")
    elif not number and (metric in QUALITY_METRICS or op in ORDERING_OPS):
        why = (
            f"'{metric}' gives a number" if metric in QUALITY_METRICS else f"'{op}' orders numbers"
        )
        raise ctx.fail(key, value, f"a number ({why}), got {type(value).__name__}")


def _parse_check(ctx: _Ctx, index: int, raw: Any) -> CheckSpec:
    cctx = _Ctx(ctx.path, f"{ctx.where}, checks[{index}]")
    if not isinstance(raw, dict):
        raise cctx.fail("checks", raw, "a table")
    _check_keys(cctx, raw, _CHECK_KEYS)
    for required in ("metric", "op", "threshold"):
        if required not in raw:
            raise CaseFileError(cctx.path, f"{cctx.where}: missing required key '{required}'")
    if raw["op"] not in OPS:
        raise cctx.fail("op", raw["op"], "one of " + ", ".join(OPS))
    _metric(cctx, raw["metric"])
    _threshold(cctx, "threshold", raw["metric"], raw["op"], raw["threshold"])
    thresholds = raw.get("thresholds", {})
    for platform, value in thresholds.items():
        if platform not in PLATFORMS:
            raise CaseFileError(
                cctx.path,
                f"{cctx.where}: key 'thresholds.{platform}': unknown platform '{platform}' "
                f"(known: {', '.join(PLATFORMS)})",
            )
        _threshold(cctx, f"thresholds.{platform}", raw["metric"], raw["op"], value)
    _check_json(cctx, "settings", raw.get("settings", {}))
    policy = raw.get("policy", "fail")
    if policy not in POLICIES:
        raise cctx.fail("policy", policy, '"fail" or "warn"')
    reduce = raw.get("reduce", "worst")
    if reduce not in ("worst", "mean"):
        raise cctx.fail("reduce", reduce, '"worst" or "mean"')
    frames = _frames(cctx, "frames", raw["frames"]) if "frames" in raw else None
    name = raw.get("name") or (
        f"{raw['metric']}" + (f"({raw['output']})" if raw.get("output") else "")
    )
    return CheckSpec(
        metric=raw["metric"],
        op=raw["op"],
        threshold=raw["threshold"],
        thresholds=dict(thresholds),
        policy=policy,
        output=raw.get("output"),
        frames=frames,
        reduce=reduce,
        name=name,
        settings=dict(raw.get("settings", {})),
    )


def parse_case(path: Path, raw: Any, where: str) -> Case:
    """Validate one case table; ``where`` says which table of the file it is."""
    if not isinstance(raw, dict):
        raise CaseFileError(path, f"{where}: expected a table, got {type(raw).__name__}")
    if isinstance(raw.get("id"), str):
        where = f"{where} (case '{raw['id']}')"
    ctx = _Ctx(path, where)
    _check_keys(ctx, raw, _CASE_KEYS)
    if "id" not in raw:
        raise CaseFileError(path, f"{where}: missing required key 'id'")
    ctx = _Ctx(path, f"case '{raw['id']}'")
    if not _ID.fullmatch(raw["id"]):
        raise ctx.fail("id", raw["id"], f"a non-empty id of {_ID_EXPECTED}")
    if "kind" not in raw:
        raise CaseFileError(path, f"{ctx.where}: missing required key 'kind'")
    if raw["kind"] not in KINDS:
        raise ctx.fail("kind", raw["kind"], "one of " + ", ".join(KINDS))
    has_target, has_command = "target" in raw, "command" in raw
    if has_target == has_command:
        raise CaseFileError(path, f"{ctx.where}: exactly one of 'target' or 'command' is required")
    if has_target and not _target_ok(raw["target"]):
        raise ctx.fail(
            "target",
            raw["target"],
            'a string "module:function" (dotted module path, function name)',
        )
    command = _str_list(ctx, "command", raw["command"]) if has_command else None
    if command is not None and not command:
        raise ctx.fail("command", raw["command"], "a non-empty list of strings")
    platforms: tuple[str, ...] | Literal["any"] = "any"
    if "platforms" in raw:
        if isinstance(raw["platforms"], str):
            if raw["platforms"] != "any":
                raise ctx.fail("platforms", raw["platforms"], 'a list of strings or "any"')
        else:
            platforms = _str_list(ctx, "platforms", raw["platforms"])
            if not platforms:
                raise ctx.fail("platforms", raw["platforms"], 'a non-empty list or "any"')
            unknown = [p for p in platforms if p not in PLATFORMS]
            if unknown:
                raise ctx.fail(
                    "platforms",
                    raw["platforms"],
                    f"known platform names ({', '.join(PLATFORMS)}); unknown: {unknown}",
                )
    for key, (lowest, highest) in _COUNTS.items():
        if key in raw and not lowest <= raw[key] <= highest:
            raise ctx.fail(key, raw[key], f"an integer from {lowest} to {highest}")
    if "timeout_s" in raw and not 0 < raw["timeout_s"] <= MAX_TIMEOUT_S:
        raise ctx.fail(
            "timeout_s",
            raw["timeout_s"],
            f"a positive number of seconds, at most {MAX_TIMEOUT_S:g} (24 h)",
        )
    if "reference" in raw and not _ID.fullmatch(raw["reference"]):
        raise ctx.fail("reference", raw["reference"], f"a reference id of {_ID_EXPECTED}")
    _check_json(ctx, "params", raw.get("params", {}))
    budget = raw.get("budget", {})
    for stage, secs in budget.items():
        if not _type_ok(secs, (int, float)) or not 0 < secs < math.inf:
            raise ctx.fail(f"budget.{stage}", secs, "a finite positive number of seconds")
    checks = tuple(_parse_check(ctx, i, c) for i, c in enumerate(raw.get("checks", [])))
    return Case(
        id=raw["id"],
        kind=raw["kind"],
        source=str(path),
        target=raw.get("target"),
        command=command,
        params=dict(raw.get("params", {})),
        seed=raw.get("seed", 0),
        platforms=platforms,
        repeats=raw.get("repeats", 1),
        retries=raw.get("retries"),
        warmup=raw.get("warmup", 0),
        timeout_s=float(raw.get("timeout_s", 300.0)),
        fresh_process=raw.get("fresh_process", False),
        checks=checks,
        reference=raw.get("reference"),
        frames=_frames(ctx, "frames", raw["frames"]) if "frames" in raw else "first-mid-last",
        budget={k: float(v) for k, v in budget.items()},
        description=raw.get("description", ""),
        tags=_str_list(ctx, "tags", raw["tags"]) if "tags" in raw else (),
        code_root=_code_root(ctx, raw["code_root"]) if "code_root" in raw else None,
        requires=_requires(ctx, raw["requires"]) if "requires" in raw else (),
    )


def load_file(path: Path) -> list[Case]:
    """All cases in one TOML file."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise CaseFileError(path, f"not valid TOML: {exc}") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise CaseFileError(path, f"cannot read: {exc}") from exc
    if "case" in data:
        extra = sorted(set(data) - {"case"})
        if extra:
            raise CaseFileError(
                path, f"top-level keys {extra} next to [[case]]: put them inside a [[case]] table"
            )
        tables = data["case"]
        if not isinstance(tables, list):
            raise CaseFileError(path, "key 'case': expected an array of tables [[case]]")
        if not tables:
            raise CaseFileError(path, "no case in file: key 'case' is an empty array")
        return [parse_case(path, t, f"[[case]] #{i + 1}") for i, t in enumerate(tables)]
    if not data:
        raise CaseFileError(path, "no case in file: expected top-level case keys or [[case]]")
    return [parse_case(path, data, "top level")]


def discover(paths: Iterable[Path]) -> list[Path]:
    """Case files under the given files or folders, sorted for a deterministic order."""
    found: list[Path] = []
    for p in paths:
        if p.is_dir():
            found.extend(sorted(q for q in p.rglob("*.toml") if q.is_file()))
        elif p.is_file():
            found.append(p)
        else:
            raise CaseFileError(p, "no such file or folder")
    return found


@dataclass(frozen=True)
class LoadResult:
    """The cases that loaded, and the errors of the files that did not."""

    cases: tuple[Case, ...]
    errors: tuple[CaseFileError, ...]


def load_suite(paths: Iterable[Path]) -> LoadResult:
    """Load every case file; a bad file is an error for that file, the others still load."""
    cases: list[Case] = []
    errors: list[CaseFileError] = []
    seen: dict[str, str] = {}
    for path in discover(paths):
        try:
            file_cases = load_file(path)
        except CaseFileError as exc:
            errors.append(exc)
            continue
        for case in file_cases:
            if case.id in seen:
                errors.append(
                    CaseFileError(
                        path,
                        f"duplicate case id '{case.id}': already defined in {seen[case.id]}",
                    )
                )
                continue
            seen[case.id] = str(path)
            cases.append(case)
    return LoadResult(tuple(cases), tuple(errors))
