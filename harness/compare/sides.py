"""The two sides of a comparison: how each runs (:func:`side_spec`), and what their run
reports say about the comparison as a whole before any case is judged: case files that did
not load (on either side: exit 2) and runs that did not finish (interrupted, a harness fault,
a shard absent: exit 3). A comparison built from an incomplete side never reads as a clean
one (DESIGN "Exit codes")."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from harness.errors import UsageError
from harness.execution.workers import SideSpec
from harness.model import RunReport, Side
from harness.model.shard import INCOMPLETE_CAUSES


def load_errors(reports: Mapping[Side, RunReport]) -> tuple[str, ...]:
    """``path: message`` for a case file that failed on both sides, ``side: path: message``
    for one that failed on one side only; in the order first seen."""
    per_side = {side: [(e.path, e.message) for e in r.load_errors] for side, r in reports.items()}
    both = set(per_side.get("base", [])) & set(per_side.get("head", []))
    out: list[str] = []
    for side, errs in per_side.items():
        for path, msg in errs:
            line = f"{path}: {msg}" if (path, msg) in both else f"{side}: {path}: {msg}"
            if line not in out:
                out.append(line)
    return tuple(out)


def incomplete(reports: Mapping[Side, RunReport]) -> tuple[str, ...]:
    """Why a side's run is not complete (its own harness faults, an interruption, planned
    cases nobody reported), one line each, prefixed with the side."""
    out: list[str] = []
    for side, r in reports.items():
        out.extend(f"{side}: {e}" for e in r.infra_errors)
        if r.interrupted:
            out.append(f"{side}: run {r.run_id} was interrupted")
        unreported = [m for m in r.missing if m.cause in INCOMPLETE_CAUSES]
        if unreported:
            names = ", ".join(m.name for m in unreported[:5])
            more = f" and {len(unreported) - 5} more" if len(unreported) > 5 else ""
            out.append(f"{side}: run {r.run_id} is incomplete: no result for {names}{more}")
    return tuple(out)


def side_spec(
    side: Side,
    checkout: Path,
    code_roots: Sequence[str],
    *,
    python: str,
    rev: str | None,
    where: str,
) -> SideSpec:
    """How one side runs: ``code_roots`` of ``checkout`` (each must exist) under ``python``;
    ``where`` names the checkout in the error when one is missing."""
    missing = [r for r in code_roots if not (checkout / r).is_dir()]
    if missing:
        label = f"{side} ({rev[:12]})" if rev else side
        raise UsageError(
            f"{label}: code root(s) {missing} do not exist in {where} "
            "(pass --code-root relative to the repository)"
        )
    return SideSpec(
        side,
        tuple(str((checkout / r).resolve()) for r in code_roots),
        python=python,
        cwd=str(Path.cwd()),
        rev=rev,
        repo=str(checkout),  # where a case's own code_root resolves
    )
