"""Environment drift: what differs between the environments of a comparison's two sides, and,
per case, that difference beside the input hashes and the first divergence.

Two CI artifacts from two runners read SSIM 0.80 and 1.00 for one commit: before anyone blames
the code, the comparison says "inputs identical (3 hashes); first divergence at
denoise.step03; environments differ in python 3.10.12 -> 3.12.3, scipy 1.11.4 -> 1.14.1".
:class:`EnvDiff` is the comparison's (``comparison.json`` ``env_diff``), :class:`Drift` each
case's (``cases[].drift``, present when the environments differ).

>>> EnvDiff(python=("3.10.12", "3.12.3"), changed={"scipy": ("1.11.4", "1.14.1")}).changes()
('python 3.10.12 -> 3.12.3', 'scipy 1.11.4 -> 1.14.1')
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

# How many differences a case's line names before "and N more" (the table has them all).
LINE_CHANGES = 6


@dataclass(frozen=True)
class EnvDiff:
    """What differs between the two sides' environments.

    ``python`` (base, head) when the versions differ; ``system``: the machine-level facts that
    differ (FFmpeg build, driver, runner image, CPU flags, OS, torch's CUDA/HIP build, devices,
    runner), name -> (base, head); packages ``added`` (head only), ``removed`` (base only) and
    ``changed`` name -> (base, head), by canonical distribution name. ``reason`` says why the
    packages could not be compared (a side's report predates the package list); then the three
    package maps are empty.
    """

    python: tuple[str | None, str | None] | None = None  # (base, head) when they differ
    added: Mapping[str, str] = field(default_factory=dict)
    removed: Mapping[str, str] = field(default_factory=dict)
    changed: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    reason: str | None = None
    system: Mapping[str, tuple[str | None, str | None]] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not (self.python or self.added or self.removed or self.changed or self.system)

    def changes(self) -> tuple[str, ...]:
        """Every difference as ``name base -> head``: Python, the system, then packages
        changed, added (``-`` on base) and removed, each alphabetical."""
        out = [] if self.python is None else [_arrow("python", *self.python)]
        out += [
            _flags(b, h) if k == "cpu flags" else _arrow(k, b, h)
            for k, (b, h) in self.system.items()
        ]
        out += [_arrow(k, b, h) for k, (b, h) in sorted(self.changed.items())]
        out += [_arrow(k, None, v) for k, v in sorted(self.added.items())]
        out += [_arrow(k, v, None) for k, v in sorted(self.removed.items())]
        return tuple(out)

    def to_json(self) -> dict[str, Any]:
        return {
            "python": None
            if self.python is None
            else {"base": self.python[0], "head": self.python[1]},
            "added": dict(self.added),
            "removed": dict(self.removed),
            "changed": {k: {"base": b, "head": h} for k, (b, h) in self.changed.items()},
            "reason": self.reason,
            **(
                {"system": {k: {"base": b, "head": h} for k, (b, h) in self.system.items()}}
                if self.system
                else {}
            ),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> EnvDiff:
        py = d.get("python")
        return cls(
            python=None if py is None else (py.get("base"), py.get("head")),
            added=dict(d.get("added", {})),
            removed=dict(d.get("removed", {})),
            changed={k: (v["base"], v["head"]) for k, v in d.get("changed", {}).items()},
            reason=d.get("reason"),
            system={k: (v.get("base"), v.get("head")) for k, v in d.get("system", {}).items()},
        )


def _arrow(name: str, base: str | None, head: str | None) -> str:
    return f"{name} {base or '-'} -> {head or '-'}"


def _flags(base: str | None, head: str | None) -> str:
    """``cpu flags +avx512f -amx_tile``: what head's CPU has that base's lacks, and back."""
    b, h = set((base or "").split()), set((head or "").split())
    return "cpu flags " + " ".join(
        [*(f"+{f}" for f in sorted(h - b)), *(f"-{f}" for f in sorted(b - h))]
    )


@dataclass(frozen=True)
class Drift:
    """One case's evidence when the environments differ: were the inputs the same, where did
    the sides first diverge, and what differs in the environments.

    ``inputs``: ``identical`` (``input_hashes`` recorded input hashes and initial-noise
    fingerprints all equal), ``differ`` (``first`` is the first that does), ``unrecorded``
    (the case records none), ``missing`` (a side has no attempt to compare). ``first``: the
    first divergent input or stage, None when nothing recorded differs.
    """

    inputs: Literal["identical", "differ", "unrecorded", "missing"]
    input_hashes: int
    first: str | None
    environment: tuple[str, ...]

    def line(self) -> str:
        """``inputs identical (3 hashes); first divergence at denoise.step03; environments
        differ in python 3.10.12 -> 3.12.3, scipy 1.11.4 -> 1.14.1``."""
        n = self.input_hashes
        if self.inputs == "identical":
            parts = [f"inputs identical ({n} hash{'es' * (n != 1)})"]
        elif self.inputs == "differ":
            parts = [f"inputs differ at {self.first}"]
        elif self.inputs == "unrecorded":
            parts = ["no input hashes recorded"]
        else:
            parts = ["a side has no attempt to compare"]
        if self.inputs in ("identical", "unrecorded"):
            parts.append(
                f"first divergence at {self.first}" if self.first else "nothing recorded differs"
            )
        env = list(self.environment[:LINE_CHANGES])
        if len(self.environment) > LINE_CHANGES:
            env.append(f"and {len(self.environment) - LINE_CHANGES} more")
        parts.append(f"environments differ in {', '.join(env)}" if env else "same environment")
        return "; ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {
            "inputs": self.inputs,
            "input_hashes": self.input_hashes,
            "first": self.first,
            "environment": list(self.environment),
            "text": self.line(),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Drift:
        return cls(
            d["inputs"], int(d.get("input_hashes", 0)), d.get("first"), tuple(d["environment"])
        )


__all__ = ["LINE_CHANGES", "Drift", "EnvDiff"]
