"""Worker specs: how one side's code is run (:class:`SideSpec`) and which worker serves a side
and platform (:func:`side_worker`), or a case with a ``code_root`` of its own
(:func:`case_worker`: a worker whose import path has that folder first, hence one of its own).

Pure data: the devices and the start-up limit come in resolved (:mod:`.resolution`).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from pathlib import Path

from harness.execution.pool import WorkerSpec
from harness.model import Case, Side
from harness.model.provenance import CHECKOUT_ENV

__all__ = ["SideSpec", "case_worker", "side_worker"]


@dataclass(frozen=True)
class SideSpec:
    """How one side's code is run: its import roots, interpreter and working directory."""

    name: Side = "head"
    code_roots: tuple[str, ...] = ()
    python: str = sys.executable
    cwd: str | None = None
    rev: str | None = None  # the revision this side's code roots hold, when known
    repo: str | None = None  # the checkout a case's `code_root` is relative to (default: cwd)

    def case_root(self, case: Case) -> Path | None:
        """The case's own code root, resolved in this side's checkout (None when it has none)."""
        if case.code_root is None:
            return None
        return (Path(self.repo or self.cwd or ".") / case.code_root).resolve()


def side_worker(
    side: Side,
    spec: SideSpec,
    platform: str,
    *,
    devices: tuple[int, ...],
    start_timeout_s: float,
    threads: int | None,
    preimport: tuple[str, ...] | None,
) -> WorkerSpec:
    """The persistent worker of ``side`` (run as ``spec`` says) on ``platform``: pinned to
    ``devices``, started within ``start_timeout_s``, its math libraries limited to ``threads``
    when given."""
    kw: dict[str, object] = {}
    if preimport is not None:
        kw["preimport"] = preimport
    extra: list[tuple[str, str]] = []
    if threads is not None:
        n = str(threads)
        extra += [("OMP_NUM_THREADS", n), ("MKL_NUM_THREADS", n), ("HARNESS_THREADS", n)]
    if spec.repo is not None:
        # The side's checkout, where its server cases start their servers.
        extra.append((CHECKOUT_ENV, spec.repo))
    if extra:
        kw["extra_env"] = tuple(extra)
    return WorkerSpec(
        platform=platform,
        code_roots=spec.code_roots,
        python=spec.python,
        cwd=spec.cwd,
        side=side,
        devices=devices,
        start_timeout_s=start_timeout_s,
        **kw,  # type: ignore[arg-type]
    )


def case_worker(base: WorkerSpec, side: SideSpec, case: Case) -> WorkerSpec:
    """The worker ``case`` runs in: ``base``, or, for a case with a code root of its own, a
    worker with that folder first on the import path, which imports what the case
    ``requires`` at start-up (where it imports: a worker without it still starts, and the case
    is skipped saying why): installed packages in the zygote it is forked from, so that the
    workers forked from one zygote import a heavy stack (diffusers: ~2.8 s of CPU) once. They
    are not part of the worker's identity: a code root's cases are one stack's, and share its
    worker whatever each requires (one that requires more imports the rest in its attempt).
    The side's own worker serves the rest of the suite, where whichever case started it
    (a server case's HTTP client, say) would decide what it imports and which zygote it is
    forked from, so it imports only what the runner profile names."""
    root = side.case_root(case)
    if root is None:
        return base
    return replace(base, code_roots=(str(root), *side.code_roots), warm=case.requires)
