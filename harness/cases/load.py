"""Case files: TOML in, validated frozen :class:`Case` records out.

A file holds one case (top-level keys) or several (``[[case]]`` tables). Every problem is an
error that names the file, the case, the key, the value and what was expected; unknown keys are
errors; ids are unique across the suite, and a duplicate names both files.

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

import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from harness.errors import CaseFileError
from harness.model.case import Case, CheckSpec
from harness.model.vocab import FRAME_MODES, KINDS, OPS, POLICIES, FrameSpec

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
        thresholds=dict(raw.get("thresholds", {})),
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
    if not raw["id"].strip() or any(c in raw["id"] for c in "[]\n"):
        raise ctx.fail("id", raw["id"], "a non-empty id without '[', ']' or newlines")
    if "kind" not in raw:
        raise CaseFileError(path, f"{ctx.where}: missing required key 'kind'")
    if raw["kind"] not in KINDS:
        raise ctx.fail("kind", raw["kind"], "one of " + ", ".join(KINDS))
    has_target, has_command = "target" in raw, "command" in raw
    if has_target == has_command:
        raise CaseFileError(path, f"{ctx.where}: exactly one of 'target' or 'command' is required")
    if has_target and (":" not in raw["target"] or raw["target"].count(":") != 1):
        raise ctx.fail("target", raw["target"], 'a string "module:function"')
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
    for key, lowest in (("repeats", 1), ("retries", 0), ("warmup", 0)):
        if key in raw and raw[key] < lowest:
            raise ctx.fail(key, raw[key], f"an integer >= {lowest}")
    if "timeout_s" in raw and raw["timeout_s"] <= 0:
        raise ctx.fail("timeout_s", raw["timeout_s"], "a positive number of seconds")
    budget = raw.get("budget", {})
    for stage, secs in budget.items():
        if not _type_ok(secs, (int, float)) or secs <= 0:
            raise ctx.fail(f"budget.{stage}", secs, "a positive number of seconds")
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
