"""Platform policy as data, resolved in one place.

What a platform's results are held to lives in TOML, never in code: the harness's defaults per
platform in ``harness/platforms/policy.toml`` (packaged), refined per runner class by the
``[policy]`` table of a runner profile (``runners/*.toml``), which applies to the profile's own
platform. :func:`resolve` turns (platform, profile) into a :class:`Policy`; every setting in it
is a :class:`Decision` that says its value, which rule decided it and from which file, and the
whole map is recorded with each result in report.json (``cases[].policy``).

Settings (the file's comment says what each means)::

    latency.on_fail         "fail" | "warn" | "skip"
    latency.rel_tolerance   relative slack over a budget
    latency.abs_floor_s     absolute slack in seconds (the larger of the two applies)
    quality.<metric>        a threshold for that metric's checks on this platform
    references.fallback     platform classes a lookup walks after runner class and platform
    layers.rel_l2           relative L2 a fingerprinted layer may move from its layered
                            reference; layers.rel_l2_for: {layer-name glob: tolerance}
    timeouts.attempt_scale  multiplies a case's timeout_s
    timeouts.worker_start_s worker start-up limit
    retry.patterns          infrastructure error patterns (added to the profile's [retry])
    retry.readiness_timeout "never" | "once_if_logs_growing" (a server not ready in time)

Example::

    pol = resolve("hip", resolve_profile("mi300x", Path("runners")))
    pol.latency_on_fail                  # "warn"
    pol.decisions["latency.on_fail"]     # Decision("warn", "runner mi300x", "runners/mi300x.toml")
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from harness.errors import ProfileError
from harness.model import Case, CheckSpec
from harness.model.vocab import PLATFORMS, QUALITY_METRICS

if TYPE_CHECKING:
    from harness.platforms.base import Identity
    from harness.platforms.profile import Profile

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
def _packaged() -> dict[str, dict[str, Any]]:
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


# --- resolution ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    """One resolved setting: its value, the rule that decided it, the file it came from."""

    value: Any
    rule: str
    source: str

    def to_json(self) -> dict[str, Any]:
        v = list(self.value) if isinstance(self.value, tuple) else self.value
        return {"value": v, "rule": self.rule, "source": self.source}


@dataclass(frozen=True)
class Policy:
    """The resolved policy of one platform on one runner class."""

    platform: str
    runner: str
    decisions: Mapping[str, Decision] = field(default_factory=dict)

    def value(self, key: str) -> Any:
        return self.decisions[key].value

    @property
    def latency_on_fail(self) -> OnFail:
        v: OnFail = self.value("latency.on_fail")
        return v

    def latency_limit(self, budget_s: float) -> float:
        """The most a stage with budget ``budget_s`` may take before the guard trips."""
        rel = float(self.value("latency.rel_tolerance"))
        floor = float(self.value("latency.abs_floor_s"))
        return max(budget_s * (1.0 + rel), budget_s + floor)

    @property
    def quality(self) -> dict[str, float]:
        return {
            k.removeprefix("quality."): float(d.value)
            for k, d in self.decisions.items()
            if k.startswith("quality.")
        }

    @property
    def attempt_scale(self) -> float:
        return float(self.value("timeouts.attempt_scale"))

    @property
    def worker_start_s(self) -> float:
        return float(self.value("timeouts.worker_start_s"))

    @property
    def retry_patterns(self) -> tuple[str, ...]:
        return tuple(self.value("retry.patterns"))

    @property
    def readiness_retry(self) -> str:
        """``retry.readiness_timeout`` with the rule that decided it, e.g.
        ``once_if_logs_growing (harness default)``."""
        d = self.decisions["retry.readiness_timeout"]
        return f"{d.value} ({d.rule})"

    def layer_tolerances(self) -> dict[str, Any]:
        """What a layered reference's fingerprints are judged by on this platform:
        ``{"rel_l2": default, "rel_l2_for": {glob: tolerance}}`` (the first glob that matches
        a layer's name wins; :func:`harness.references.layered.tolerance_for`)."""
        found = self.decisions.get("layers.rel_l2_for")
        return {
            "rel_l2": float(self.value("layers.rel_l2")),
            "rel_l2_for": dict(found.value) if found is not None else {},
        }

    def reference_chain(self, runner_class: str | None) -> tuple[str, ...]:
        """Where references are looked up: the runner class (when it is of this platform),
        the platform, then ``references.fallback``."""
        chain: list[str] = []
        for p in (runner_class, self.platform, *self.value("references.fallback")):
            if p and p not in chain:
                chain.append(p)
        return tuple(chain)

    def to_json(self) -> dict[str, dict[str, Any]]:
        return {k: d.to_json() for k, d in sorted(self.decisions.items())}


def resolve(
    platform: str, profile: Profile | None = None, *, defaults: Path | None = None
) -> Policy:
    """The policy of ``platform`` on the runner class ``profile``: the profile's ``[policy]``
    (for its own platform only), then ``[<platform>]``, then ``[default]`` of the defaults file
    (the packaged policy.toml unless ``defaults`` names another)."""
    table = load_defaults(defaults) if defaults is not None else _packaged()
    source = str(defaults or DEFAULTS_PATH)
    layers: list[tuple[Mapping[str, Any], str, str]] = []
    runner = profile.name if profile is not None else "cpu"
    if profile is not None and profile.platform == platform and profile.policy:
        layers.append((profile.policy, f"runner {profile.name}", profile.source))
    layers.append((table.get(platform, {}), f"platform {platform} default", source))
    layers.append((table[DEFAULT], "harness default", source))
    keys = sorted({k for settings, _, _ in layers for k in settings})
    decisions: dict[str, Decision] = {}
    for key in keys:
        for settings, rule, src in layers:
            if key in settings:
                v = settings[key]
                decisions[key] = Decision(tuple(v) if isinstance(v, list) else v, rule, src)
                break
    # The profile's [retry] patterns keep working: they mark infrastructure on this runner,
    # whatever platform runs there, and add to the platform's own.
    if profile is not None and profile.retry.patterns:
        plat = decisions["retry.patterns"]
        merged = tuple(dict.fromkeys((*profile.retry.patterns, *plat.value)))
        rule = f"runner {profile.name} [retry] + {plat.rule}"
        decisions["retry.patterns"] = Decision(merged, rule, f"{profile.source}, {plat.source}")
    return Policy(platform, runner, decisions)


# --- applying it --------------------------------------------------------------------------------


def threshold_chain(reference_chain: Sequence[str], identity: Identity | None) -> tuple[str, ...]:
    """The chain a check's ``thresholds`` are read along: the reference chain with
    ``<platform>:<arch>`` (e.g. ``hip:gfx950``) put before the platform, so a case can hold one
    threshold for MI300 (gfx942) and another for MI355 (gfx950)."""
    chain = list(reference_chain)
    if identity is not None and identity.arch and identity.platform in chain:
        chain.insert(chain.index(identity.platform), f"{identity.platform}:{identity.arch}")
    return tuple(chain)


def quality_decisions(pol: Policy) -> dict[str, Decision]:
    """The policy's quality thresholds by metric (``quality.ssim`` -> ``ssim``)."""
    return {
        k.removeprefix("quality."): d for k, d in pol.decisions.items() if k.startswith("quality.")
    }


def fill_thresholds(
    case: Case, platform: str, quality: Mapping[str, Decision], chain: Sequence[str]
) -> tuple[Case, dict[str, Decision]]:
    """``case`` with the thresholds of ``quality`` (metric -> decision, resolved once for
    ``platform``: :func:`quality_decisions`) filled in for checks whose case names no threshold
    on ``chain``, and the decision behind each quality check's threshold."""
    decided: dict[str, Decision] = {}
    checks: list[CheckSpec] = []
    for spec in case.checks:
        own = next((p for p in chain if p in spec.thresholds), None)
        key = f"quality.{spec.name or spec.metric}"
        policy = quality.get(spec.metric)
        if own is not None:
            if policy is not None:
                decided[key] = Decision(spec.thresholds[own], f"case thresholds.{own}", case.source)
            checks.append(spec)
        elif policy is not None:
            decided[key] = policy
            value = float(policy.value)
            checks.append(replace(spec, thresholds={**spec.thresholds, platform: value}))
        else:
            checks.append(spec)
    return replace(case, checks=tuple(checks)), decided


def apply_quality(
    case: Case, pol: Policy, chain: Sequence[str]
) -> tuple[Case, dict[str, Decision]]:
    """``case`` with the policy's quality thresholds filled in for checks whose case names no
    threshold on ``chain``, and the decision behind each quality check's threshold."""
    return fill_thresholds(case, pol.platform, quality_decisions(pol), chain)


def describe(profile: Profile, platform: str | None = None) -> list[str]:
    """The resolved policy of ``profile`` (for its platform unless ``platform`` is given), one
    line per setting, each with the rule that decided it and its file: what ``harness
    platforms --runner NAME`` prints."""
    plat = platform or profile.platform
    pol = resolve(plat, profile)
    arch = profile.arch if profile.platform == plat else None
    lines = [
        f"policy of platform {plat} on runner {profile.name}"
        + (f" (arch {arch})" if arch else "")
        + f": device_count {profile.device_count}, time budget "
        + (f"{profile.time_budget_s:g} s" if profile.time_budget_s else "none")
    ]
    width = max(len(k) for k in pol.decisions)
    for key, d in sorted(pol.decisions.items()):
        v = d.value
        shown = "[" + ", ".join(map(str, v)) + "]" if isinstance(v, tuple) else f"{v}"
        lines.append(f"  {key.ljust(width)}  {shown}  ({d.rule}: {d.source})")
    return lines


__all__ = [
    "DEFAULTS_PATH",
    "ON_FAIL",
    "READINESS_RETRY",
    "Decision",
    "Policy",
    "apply_quality",
    "describe",
    "fill_thresholds",
    "load_defaults",
    "quality_decisions",
    "resolve",
    "threshold_chain",
    "validate_table",
]
