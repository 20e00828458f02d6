"""Runner profiles: one TOML file per runner class in ``runners/`` (``cpu.toml``, ``h100.toml``).

A profile holds the defaults a runner class brings: its platform and the architecture of its
devices (``arch``, which a simulated run of that platform presents: ``mi355x`` -> ``gfx950``),
device count, the run's time budget, the retry policy, per-case latency budgets for that
hardware, and a ``[policy]`` table that refines the platform's policy
(:mod:`harness.platforms.policy`: latency guard, tolerances, quality thresholds, reference
fallback, timeouts). Every key is validated; an error names the file, the key and what was
expected.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import ProfileError
from harness.model.vocab import MAX_RETRIES, PLATFORMS
from harness.platforms.policy_tables import validate_table

RETRY_CLASSES: tuple[str, ...] = ("infra", "oom", "timeout", "crashed")
# A runner-class name is a platform class of the reference store (a folder there) and a
# fallback in threshold lookups: one safe path segment, like a case id.
_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")
_ARCH = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_MODULE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
MAX_THREADS = 1024
MAX_DEVICES = 1024


@dataclass(frozen=True)
class RetryPolicy:
    """How many extra attempts a retryable failure earns, and what counts as retryable."""

    retries: int = 1
    retry_on: tuple[str, ...] = ("infra", "oom", "timeout")
    patterns: tuple[str, ...] = ()
    # The platform policy's retry.readiness_timeout and the rule that decided it:
    # "once_if_logs_growing (harness default)" (harness.execution.retry.readiness_decision).
    readiness: str = "once_if_logs_growing (harness default)"


@dataclass(frozen=True)
class Profile:
    """A runner class."""

    name: str = "cpu"
    platform: str = "cpu"
    device_count: int = 0
    time_budget_s: float | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    budgets: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    # CPU threads per worker (OMP/MKL and torch). Pinned so latency on a shared runner measures
    # the code, not the scheduler: spin-waiting intra-op threads are very noisy under load.
    threads: int | None = None
    # `harness compare` on this runner class: latency delta and quality margins per metric
    compare_delta: float | None = None
    compare_margins: Mapping[str, float] = field(default_factory=dict)
    source: str = ""
    # The architecture of this runner class's devices (gfx942, gfx950, sm_90, Ascend910B3); a
    # simulated run of ``platform`` presents it. None: the platform module's default.
    arch: str | None = None
    # The [policy] table, validated and flat ("latency.on_fail" -> "warn"); applies to
    # ``platform`` only.
    policy: Mapping[str, Any] = field(default_factory=dict)
    # The modules a persistent worker imports before it says it is ready, so that no case's
    # first attempt pays for them. None: the harness default (numpy and torch); ``[]`` for a
    # stack that uses neither.
    preimport: tuple[str, ...] | None = None
    # Packages a coverage attempt measures besides the side's code roots (installed ones the
    # stack under test ships, e.g. ["diffusers"]).
    coverage_packages: tuple[str, ...] = ()


def _expect(path: Path, key: str, value: Any, types: tuple[type, ...], name: str) -> Any:
    if isinstance(value, bool) and bool not in types:
        raise ProfileError(f"{path}: key '{key}' = {value!r}: expected {name}")
    if not isinstance(value, types):
        raise ProfileError(f"{path}: key '{key}' = {value!r}: expected {name}")
    return value


def _count(path: Path, key: str, value: Any, lowest: int, highest: int) -> int:
    expected = f"an integer from {lowest} to {highest}"
    if not lowest <= _expect(path, key, value, (int,), expected) <= highest:
        raise ProfileError(f"{path}: key '{key}' = {value!r}: expected {expected}")
    return int(value)


def _seconds(path: Path, key: str, value: Any) -> float:
    expected = "a finite positive number of seconds"
    if not 0 < _expect(path, key, value, (int, float), expected) < math.inf:
        raise ProfileError(f"{path}: key '{key}' = {value!r}: expected {expected}")
    return float(value)


def load_profile(path: Path) -> Profile:
    """Read and validate one profile file."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ProfileError(f"{path}: no such runner profile") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"{path}: not valid TOML: {exc}") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ProfileError(f"{path}: cannot read runner profile: {exc}") from exc
    known = {
        "name",
        "platform",
        "device_count",
        "time_budget_s",
        "retry",
        "budgets",
        "threads",
        "compare",
        "arch",
        "policy",
        "preimport",
        "coverage_packages",
    }
    for key in data:
        if key not in known:
            raise ProfileError(f"{path}: unknown key '{key}' (known keys: {sorted(known)})")
    retry_raw = _expect(path, "retry", data.get("retry", {}), (dict,), "a table")
    for key in retry_raw:
        if key not in {"retries", "retry_on", "patterns"}:
            raise ProfileError(f"{path}: unknown key 'retry.{key}'")
    retry_on = tuple(
        _expect(
            path,
            "retry.retry_on",
            retry_raw.get("retry_on", ["infra", "oom", "timeout"]),
            (list,),
            "a list of strings",
        )
    )
    for cls in retry_on:
        if cls not in RETRY_CLASSES:
            raise ProfileError(
                f"{path}: key 'retry.retry_on' has {cls!r}: expected one of {RETRY_CLASSES}"
            )
    patterns = tuple(
        _expect(
            path,
            "retry.patterns",
            retry_raw.get("patterns", []),
            (list,),
            "a list of regular expressions",
        )
    )
    for pat in patterns:
        try:
            re.compile(pat)
        except (re.error, TypeError) as exc:
            raise ProfileError(f"{path}: key 'retry.patterns' has {pat!r}: {exc}") from exc
    budgets_raw = _expect(path, "budgets", data.get("budgets", {}), (dict,), "a table")
    budgets: dict[str, dict[str, float]] = {}
    for case_id, stages in budgets_raw.items():
        _expect(path, f"budgets.{case_id}", stages, (dict,), "a table of stage = seconds")
        budgets[case_id] = {
            s: _seconds(path, f"budgets.{case_id}.{s}", v) for s, v in stages.items()
        }
    threads = data.get("threads")
    if threads is not None:
        _count(path, "threads", threads, 1, MAX_THREADS)
    compare_raw = _expect(path, "compare", data.get("compare", {}), (dict,), "a table")
    for key in compare_raw:
        if key not in {"delta", "margins"}:
            raise ProfileError(f"{path}: unknown key 'compare.{key}' (known: delta, margins)")
    delta = compare_raw.get("delta")
    if delta is not None:
        _expect(path, "compare.delta", delta, (int, float), "a relative change, e.g. 0.05")
    margins_raw = _expect(
        path, "compare.margins", compare_raw.get("margins", {}), (dict,), "a table"
    )
    margins = {
        m: float(_expect(path, f"compare.margins.{m}", v, (int, float), "a number"))
        for m, v in margins_raw.items()
    }
    budget = data.get("time_budget_s")
    name = _expect(path, "name", data.get("name", path.stem), (str,), "a string")
    if not _NAME.fullmatch(name):
        raise ProfileError(
            f"{path}: key 'name' = {name!r}: expected letters, digits, '.', '_' or '-', "
            "not starting with '.'"
        )
    platform = _expect(path, "platform", data.get("platform", "cpu"), (str,), "a string")
    if platform not in PLATFORMS:
        raise ProfileError(
            f"{path}: key 'platform' = {platform!r}: expected one of {', '.join(PLATFORMS)}"
        )
    arch = data.get("arch")
    if arch is not None and not (isinstance(arch, str) and _ARCH.fullmatch(arch)):
        raise ProfileError(
            f"{path}: key 'arch' = {arch!r}: expected an architecture name such as 'gfx942', "
            "'sm_90' or 'Ascend910B3' (letters, digits, '_', '.', '-')"
        )
    policy = validate_table(path, "policy", data.get("policy", {}))
    preimport = data.get("preimport")
    if preimport is not None:
        expected = "a list of module names, e.g. ['numpy', 'torch'] ([] for none)"
        _expect(path, "preimport", preimport, (list,), expected)
        for mod in preimport:
            if not (isinstance(mod, str) and _MODULE.fullmatch(mod)):
                raise ProfileError(f"{path}: key 'preimport' has {mod!r}: expected {expected}")
    coverage_packages = data.get("coverage_packages", [])
    expected = "a list of package names, e.g. ['diffusers']"
    _expect(path, "coverage_packages", coverage_packages, (list,), expected)
    for mod in coverage_packages:
        if not (isinstance(mod, str) and _MODULE.fullmatch(mod)):
            raise ProfileError(f"{path}: key 'coverage_packages' has {mod!r}: expected {expected}")
    return Profile(
        name=name,
        platform=platform,
        device_count=_count(path, "device_count", data.get("device_count", 0), 0, MAX_DEVICES),
        time_budget_s=_seconds(path, "time_budget_s", budget) if budget is not None else None,
        retry=RetryPolicy(
            retries=_count(path, "retry.retries", retry_raw.get("retries", 1), 0, MAX_RETRIES),
            retry_on=retry_on,
            patterns=patterns,
        ),
        budgets=budgets,
        threads=threads,
        compare_delta=float(delta) if delta is not None else None,
        compare_margins=margins,
        source=str(path),
        arch=arch,
        policy=policy,
        preimport=tuple(preimport) if preimport is not None else None,
        coverage_packages=tuple(coverage_packages),
    )


def resolve_profile(name_or_path: str | None, runners_dir: Path) -> Profile:
    """A profile by name (``runners/<name>.toml``) or path; the built-in CPU defaults if None."""
    if name_or_path is None:
        default = runners_dir / "cpu.toml"
        return load_profile(default) if default.is_file() else Profile()
    p = Path(name_or_path)
    if p.suffix == ".toml" or p.is_file():
        return load_profile(p)
    candidate = runners_dir / f"{name_or_path}.toml"
    if not candidate.is_file():
        available = sorted(q.stem for q in runners_dir.glob("*.toml"))
        raise ProfileError(
            f"runner profile '{name_or_path}' not found in {runners_dir} (available: {available})"
        )
    return load_profile(candidate)
