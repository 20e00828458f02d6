"""Each case's environment drift (:class:`harness.model.Drift`): when a comparison's two sides
ran in different environments (two saved runs from two runners, ``--allow-different-env``; or
``--base-env/--head-env``), every case carries its input hashes, its first divergence and the
environment differences side by side, so "the code changed" and "the runner changed" read apart.

Example::

    cases = with_drift(cases, {"base": base_report, "head": head_report}, comparison_env_diff)
    cases[0].drift.line()
    # "inputs identical (2 hashes); first divergence at render.image; environments differ in
    #  tinyav-knob 1.0 -> 2.0"
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from harness.compare.divergence import is_input_like, pick
from harness.model import Attempt, CaseComparison, Drift, EnvDiff, RunReport, Side


def input_hashes(base: Attempt, head: Attempt) -> int:
    """How many recorded input hashes and initial-noise fingerprints the two attempts share."""
    names = set(base.inputs) & set(head.inputs)
    names |= {n for n in base.fingerprints if is_input_like(n) and n in head.fingerprints}
    return len(names)


def case_drift(
    c: CaseComparison, base: Attempt | None, head: Attempt | None, diff: EnvDiff
) -> Drift:
    """One case's drift from its picked attempts (:func:`~.divergence.pick`) and divergence."""
    env = diff.changes()
    if base is None or head is None:
        return Drift("missing", 0, None, env)
    d = c.divergence
    if d.kind == "inputs":
        return Drift("differ", input_hashes(base, head), d.first, env)
    n = input_hashes(base, head)
    first = d.first if d.kind in ("stage", "nonfinite") else None
    return Drift("identical" if n else "unrecorded", n, first, env)


def with_drift(
    cases: Iterable[CaseComparison], reports: Mapping[Side, RunReport], diff: EnvDiff | None
) -> tuple[CaseComparison, ...]:
    """``cases``, each with its drift when ``diff`` says the environments differ; unchanged
    otherwise."""
    cases = tuple(cases)
    if diff is None or diff.empty:
        return cases
    by_side = {side: {(r.id, r.platform): r for r in rep.cases} for side, rep in reports.items()}
    out = []
    for c in cases:
        picked = {}
        for side in ("base", "head"):
            result = by_side.get(side, {}).get((c.id, c.platform))
            picked[side] = pick(result.attempts) if result is not None else None
        out.append(replace(c, drift=case_drift(c, picked["base"], picked["head"], diff)))
    return tuple(out)


__all__ = ["case_drift", "input_hashes", "with_drift"]
