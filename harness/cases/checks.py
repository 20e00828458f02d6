"""A case's ``[[case.checks]]`` tables: known keys, a known metric, a threshold of the type
its metric and op need (so a check can pass and can fail), per-platform (and ``platform:arch``)
thresholds, ``needs_device`` only on note checks."""

from __future__ import annotations

import re
from typing import Any

from harness.cases.fields import (
    NOT_FINITE,
    Ctx,
    check_json,
    check_keys,
    finite,
    parse_frames,
    type_ok,
)
from harness.errors import CaseFileError
from harness.model.case import CheckSpec
from harness.model.vocab import (
    CASE_LEVEL_METRICS,
    NOTE_PREFIX,
    OPS,
    ORDERING_OPS,
    PLATFORMS,
    POLICIES,
    QUALITY_METRICS,
)

_ARCH = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_KNOWN_METRICS = ", ".join((*QUALITY_METRICS, *CASE_LEVEL_METRICS, f"{NOTE_PREFIX}<key>"))

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
    "needs_device": ((bool,), "boolean"),
}


def _metric(ctx: Ctx, metric: str) -> None:
    if metric in QUALITY_METRICS or metric in CASE_LEVEL_METRICS:
        return
    if metric.startswith(NOTE_PREFIX) and metric != NOTE_PREFIX:
        return
    raise ctx.fail("metric", metric, f"one of {_KNOWN_METRICS}")


def _threshold(ctx: Ctx, key: str, metric: str, op: str, value: Any) -> None:
    """The threshold has the type the metric and the op need, so a check can ever pass."""
    if not type_ok(value, (int, float, str, bool)):
        raise ctx.fail(key, value, f"a number, string or boolean, got {type(value).__name__}")
    number = type_ok(value, (int, float))
    if not finite(value):
        raise ctx.fail(key, value, NOT_FINITE)
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


def parse_check(ctx: Ctx, index: int, raw: Any) -> CheckSpec:
    cctx = Ctx(ctx.path, f"{ctx.where}, checks[{index}]")
    if not isinstance(raw, dict):
        raise cctx.fail("checks", raw, "a table")
    check_keys(cctx, raw, _CHECK_KEYS)
    for required in ("metric", "op", "threshold"):
        if required not in raw:
            raise CaseFileError(cctx.path, f"{cctx.where}: missing required key '{required}'")
    if raw["op"] not in OPS:
        raise cctx.fail("op", raw["op"], "one of " + ", ".join(OPS))
    _metric(cctx, raw["metric"])
    _threshold(cctx, "threshold", raw["metric"], raw["op"], raw["threshold"])
    thresholds = raw.get("thresholds", {})
    for key, value in thresholds.items():
        platform, colon, arch = key.partition(":")
        if platform not in PLATFORMS:
            raise CaseFileError(
                cctx.path,
                f"{cctx.where}: key 'thresholds.{key}': unknown platform '{platform}' "
                f"(known: {', '.join(PLATFORMS)}; a key may also be 'platform:arch', "
                "e.g. 'hip:gfx950')",
            )
        if colon and not _ARCH.fullmatch(arch):
            raise CaseFileError(
                cctx.path,
                f"{cctx.where}: key 'thresholds.{key}': architecture {arch!r}: expected a name "
                "such as 'gfx950' or 'sm_90' (letters, digits, '_', '.', '-')",
            )
        _threshold(cctx, f"thresholds.{key}", raw["metric"], raw["op"], value)
    needs_device = raw.get("needs_device", False)
    if needs_device and not raw["metric"].startswith(NOTE_PREFIX):
        raise cctx.fail(
            "needs_device",
            needs_device,
            f"false for '{raw['metric']}': only a note.<key> check asserts what ran on the "
            "device (a quality metric is judged on the outputs, simulated or not)",
        )
    check_json(cctx, "settings", raw.get("settings", {}))
    policy = raw.get("policy", "fail")
    if policy not in POLICIES:
        raise cctx.fail("policy", policy, '"fail" or "warn"')
    reduce = raw.get("reduce", "worst")
    if reduce not in ("worst", "mean"):
        raise cctx.fail("reduce", reduce, '"worst" or "mean"')
    frames = parse_frames(cctx, "frames", raw["frames"]) if "frames" in raw else None
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
        needs_device=needs_device,
    )
