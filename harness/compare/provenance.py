"""Code provenance (DESIGN.md "Code provenance"): did each side of a comparison run its own code?

Every attempt records the file its target was imported from (the note ``harness.target_file``),
and the files every other process of it ran: each rank of a multi-rank case, each rank of a
server that called ``harness.probe.request`` (:mod:`harness.model.provenance`).
A side's file must lie inside that side's own places: its checkout and code roots, and, in a
comparison of two environments, its own environment (``sys.prefix``) too. Two sides from
different checkouts that name one file ran one copy of the code twice. Either way the case is
``not_comparable`` and the reason names both sides' files; :func:`check` returns that reason.

A side whose places are not known (a report written before they were recorded) is not checked
for them; an attempt with no target file (a command case, one that never imported its target)
is not checked at all.

Example::

    origins = {"base": Origin(("/tmp/wt/base",)), "head": Origin(("/tmp/wt/head",))}
    check(base_result, head_result, origins)   # None, or "code provenance: ..."
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness.cases import PlanItem
from harness.execution.workers import SideSpec
from harness.model import CaseResult, Side
from harness.model.counting import ran
from harness.model.provenance import TARGET_FILE, code_files

NOTE = TARGET_FILE

__all__ = ["NOTE", "Origin", "check", "live_origin", "origin_from_env", "target_files"]


def _real(path: str) -> str:
    return os.path.realpath(path)


def _inside(file: str, folder: str) -> bool:
    return os.path.commonpath([file, folder]) == folder


@dataclass(frozen=True)
class Origin:
    """Where one side's code under test may come from: folders (its checkout, code roots) and
    its own environment's prefix, when that environment is what the side stands for.
    ``roots`` empty: not known, so not checked."""

    roots: tuple[str, ...] = ()
    env: str | None = None

    @classmethod
    def of(cls, roots: Sequence[str | None], env: str | None = None) -> Origin:
        return cls(tuple(dict.fromkeys(_real(r) for r in roots if r)), _real(env) if env else None)

    @property
    def known(self) -> bool:
        return bool(self.roots)

    def holds(self, file: str) -> bool:
        real = _real(file)
        places = (*self.roots, *((self.env,) if self.env else ()))
        return any(_inside(real, p) for p in places)

    def describe(self) -> str:
        where = "its checkout" + ("s" if len(self.roots) > 1 else "")
        text = f"{where} ({', '.join(self.roots)})"
        return text + (f" or its environment ({self.env})" if self.env else "")


def origin_from_env(env: Mapping[str, Any], *, own_env: bool) -> Origin:
    """A saved side's places, from its report's environment record: ``code_roots`` and
    ``checkout``, and with ``own_env`` the interpreter's ``python.prefix``."""
    roots = env.get("code_roots")
    roots = [str(r) for r in roots] if isinstance(roots, list) else []
    checkout = env.get("checkout")
    if isinstance(checkout, str):
        roots.append(checkout)
    py = env.get("python")
    prefix = py.get("prefix") if own_env and isinstance(py, Mapping) else None
    return Origin.of(roots, prefix if isinstance(prefix, str) else None)


def target_files(result: CaseResult | None) -> list[str]:
    """The distinct files the side's code under test came from, over every attempt that ran:
    its target's, every rank's of a multi-rank case, the server's ranks' (see
    :func:`harness.model.provenance.code_files`)."""
    if result is None:
        return []
    files = (f for a in ran(result.attempts) for f in code_files(a.notes).values())
    return list(dict.fromkeys(files))


def check(
    base: CaseResult | None, head: CaseResult | None, origins: Mapping[Side, Origin]
) -> str | None:
    """None when each side's target came from its own places and the sides did not share one
    file across two checkouts; else the reason (``code provenance: ...``), naming both files."""
    files: dict[Side, list[str]] = {"base": target_files(base), "head": target_files(head)}
    shown = "; ".join(f"{s} imported {', '.join(f) or 'no target file'}" for s, f in files.items())
    problems = []
    for side, side_files in files.items():
        origin = origins.get(side, Origin())
        if not origin.known:
            continue
        stray = [f for f in side_files if not origin.holds(f)]
        if stray:
            problems.append(f"{side}'s target came from outside {origin.describe()}")
    b, h = origins.get("base", Origin()), origins.get("head", Origin())
    if b.known and h.known and set(b.roots) != set(h.roots):
        shared = {_real(f) for f in files["base"]} & {_real(f) for f in files["head"]}
        if shared:
            problems.append(
                "base and head ran one file from two checkouts: head was compared with itself"
            )
    if not problems:
        return None
    return f"code provenance: {'; '.join(problems)} ({shown})"


def live_origin(spec: SideSpec, item: PlanItem, env: Mapping[str, Any] | None) -> Origin:
    """Where a live side's target may come from: its checkout, its code roots and the case's
    own code root, and with ``env`` (the side's environment record) its ``sys.prefix``."""
    root = spec.case_root(item.case)
    prefix = None
    if env is not None and isinstance(env.get("python"), Mapping):
        prefix = env["python"].get("prefix")
    return Origin.of(
        [spec.repo, *spec.code_roots, str(root) if root else None],
        prefix if isinstance(prefix, str) else None,
    )
