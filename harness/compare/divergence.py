"""First divergence: where base and head first differ for the same case and seed.

Walks, in the order the target recorded them, the hashes of the decoded inputs, then the
fingerprints of intermediate tensors, then the outputs, and reports the first that differs:

- ``inputs``: a decoded input, or a fingerprint of the initial noise (a name ending in
  ``.init``, or with a ``noise`` part as in ``latents.noise``; ``denoise`` is not one),
  differs: input or runtime drift, not a model change;
- ``nonfinite``: the first differing fingerprint holds NaN/Inf (``detail.side`` says where);
- ``stage``: the first differing fingerprint, with its min/max/mean deltas (a lower bound of
  the largest absolute difference) and the step when its name carries one;
- ``none``: everything recorded is identical; ``missing``: a side recorded nothing to compare.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from harness.model import NOT_RUN, Attempt, Divergence, finals

_STEP = re.compile(r"step[_-]?(\d+)", re.IGNORECASE)


def is_input_like(name: str) -> bool:
    """Fingerprints that record what goes in (initial noise), not what the model computed."""
    parts = re.split(r"[._/-]", name.lower())
    return parts[-1] == "init" or "noise" in parts or parts[0] == "input"


def pick(attempts: Sequence[Attempt]) -> Attempt | None:
    """The attempt a side is represented by: its first measured run's final attempt (same
    seed on both), preferring one that passed."""
    fs = [a for a in finals(attempts) if a.status not in NOT_RUN]
    return next((a for a in fs if a.status == "passed"), fs[0] if fs else None)


def _deltas(b: Mapping[str, Any], h: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "base_hash": b.get("hash"),
        "head_hash": h.get("hash"),
    }
    for key in ("dtype", "shape"):
        if b.get(key) != h.get(key):
            out[f"base_{key}"], out[f"head_{key}"] = b.get(key), h.get(key)
    bounds = []
    for key in ("min", "max", "mean"):
        bv, hv = b.get(key), h.get(key)
        if isinstance(bv, int | float) and isinstance(hv, int | float):
            out[f"{key}_delta"] = float(hv) - float(bv)
            bounds.append(abs(float(hv) - float(bv)))
    if bounds:
        out["max_abs_diff_at_least"] = max(bounds)
    return out


def _step(name: str) -> int | None:
    m = _STEP.search(name)
    return int(m.group(1)) if m else None


def first_divergence(base: Attempt | None, head: Attempt | None) -> Divergence:
    """The first recorded difference between ``base`` and ``head`` (see the module doc)."""
    if base is None or head is None:
        side = "base" if base is None else "head"
        return Divergence("missing", None, {"reason": f"{side} has no measured attempt"})
    for name, bh in base.inputs.items():
        hh = head.inputs.get(name)
        if hh != bh:
            return Divergence("inputs", name, {"base_hash": bh, "head_hash": hh})
    for name in head.inputs:
        if name not in base.inputs:
            return Divergence("inputs", name, {"base_hash": None, "head_hash": head.inputs[name]})
    hf = head.fingerprints
    for name, bfp in base.fingerprints.items():
        hfp = hf.get(name)
        if hfp is None:
            if head.status == "passed":
                return Divergence("stage", name, {"reason": "recorded by base only"})
            # head stopped early: its failure is the finding, the failure matrix has it
            return Divergence("stage", name, {"reason": f"head stopped before it ({head.status})"})
        if hfp.get("hash") == bfp.get("hash"):
            continue
        detail = _deltas(bfp, hfp)
        step = _step(name)
        if step is not None:
            detail["step"] = step
        if is_input_like(name):
            return Divergence("inputs", name, detail)
        sides = [s for s, fp in (("base", bfp), ("head", hfp)) if int(fp.get("nonfinite") or 0) > 0]
        if sides:
            detail["side"] = "both" if len(sides) == 2 else sides[0]
            detail["nonfinite_base"] = int(bfp.get("nonfinite") or 0)
            detail["nonfinite_head"] = int(hfp.get("nonfinite") or 0)
            return Divergence("nonfinite", name, detail)
        later = _first_nonfinite(base, head, after=name)
        if later is not None:
            detail["first_nonfinite"] = later
        return Divergence("stage", name, detail)
    for name in hf:
        if name not in base.fingerprints:
            return Divergence("stage", name, {"reason": "recorded by head only"})
    for name, bo in base.outputs.items():
        ho = head.outputs.get(name)
        if ho is None or ho.get("hash") != bo.get("hash"):
            return Divergence(
                "stage",
                f"output:{name}",
                {"base_hash": bo.get("hash"), "head_hash": ho.get("hash") if ho else None},
            )
    return Divergence("none")


def _first_nonfinite(base: Attempt, head: Attempt, *, after: str) -> str | None:
    seen = False
    for name, hfp in head.fingerprints.items():
        seen = seen or name == after
        if seen and int(hfp.get("nonfinite") or 0) > 0:
            bfp = base.fingerprints.get(name, {})
            if int(bfp.get("nonfinite") or 0) == 0:
                return name
    return None
