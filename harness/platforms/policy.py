"""Platform policy as data, resolved in one place.

What a platform's results are held to lives in TOML, never in code: the harness's defaults per
platform in ``harness/platforms/policy.toml`` (packaged), refined per runner class by the
``[policy]`` table of a runner profile (``runners/*.toml``), which applies to the profile's own
platform; both are validated by :mod:`harness.platforms.policy_tables`. :func:`resolve` turns
(platform, profile) into a :class:`Policy`; every setting in it is a :class:`Decision` that says
its value, which rule decided it and from which file, and the whole map is recorded with each
result in report.json (``cases[].policy``).

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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.model import Case, CheckSpec
from harness.platforms.policy_tables import (
    DEFAULT,
    DEFAULTS_PATH,
    ON_FAIL,
    READINESS_RETRY,
    OnFail,
    load_defaults,
    packaged_defaults,
    validate_table,
)

if TYPE_CHECKING:
    from harness.platforms.base import Identity
    from harness.platforms.profile import Profile


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
    table = load_defaults(defaults) if defaults is not None else packaged_defaults()
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
