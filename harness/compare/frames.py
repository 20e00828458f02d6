"""One output judged frame by frame, base against head: each side's per-frame values
against the reference (base's median run, head's worst), how much worse head is per frame,
and the verdict with the frame it rests on (:mod:`harness.compare.quality` gathers them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.metrics import aggregate
from harness.model import fmt_number
from harness.references.store import ReferenceEntry


def worst_index(per: np.ndarray, higher: bool) -> int:
    nan = np.flatnonzero(np.isnan(per))
    if nan.size:
        return int(nan[0])
    return int(np.argmin(per) if higher else np.argmax(per))


@dataclass(frozen=True)
class Judged:
    """Per frame, each side against the reference: base's median run, head's worst run."""

    base: np.ndarray
    head: np.ndarray
    spread: np.ndarray
    higher: bool
    entry: ReferenceEntry
    foreign: bool

    def fields(self, margin: float, source: str) -> dict[str, Any]:
        spread = float(self.spread.max()) if self.spread.size else 0.0
        return {
            "base_vs_ref": aggregate(self.base, higher_is_better=self.higher, reduce="worst"),
            "head_vs_ref": aggregate(self.head, higher_is_better=self.higher, reduce="worst"),
            "base_spread": spread,
            "margin": margin + spread,
            "margin_source": source if not spread else f"{source} + base spread",
            "frames": int(self.base.size),
            "reference": self.entry.key,
            "reference_platform": self.entry.blessed_on,
            "foreign_reference": self.foreign,
        }

    def verdict(self, margin: float, metric: str) -> tuple[str, int | None, str]:
        """The verdict, the frame it rests on (when it rests on one) and why."""
        worse = worse_by(self.base, self.head, self.higher)
        allowed = margin + self.spread
        n = self.base.size
        # ties (every blacked-out frame infinitely worse than an exact base) go to the frame
        # whose head value is worst
        head_rank = -self.head if self.higher else self.head
        head_rank = np.where(np.isnan(head_rank), np.inf, head_rank)
        order = np.lexsort((head_rank, worse))
        i, j = int(order[-1]), int(order[0])  # the most worse, the most better

        def at(k: int, rel: str) -> str:
            frame = f"frame {k} of {n}: " if n > 1 else ""
            return (
                f"{frame}{metric} vs reference {fmt_number(self.base[k])} -> "
                f"{fmt_number(self.head[k])} ({rel} the margin {fmt_number(allowed[k])})"
            )

        def frame(k: int) -> int | None:
            return k if n > 1 else None  # a clip or an image has no frame to name

        if worse[i] > allowed[i]:
            return "regression", frame(i), at(i, "worse than") + self._whose()
        if -worse[j] > allowed[j]:
            if self.foreign:
                why = ": a change towards another platform's reference is not an improvement"
                return "changed", None, at(j, "closer than") + self._whose() + why
            return "improvement", frame(j), at(j, "better than")
        return "changed", None, at(i, "within") + self._whose()

    def _whose(self) -> str:
        if not self.foreign:
            return ""
        where = self.entry.blessed_on or "an unrecorded platform"
        return f"; reference {self.entry.key} was blessed on {where}, not this simulated one"


def finite_range(values: np.ndarray) -> np.ndarray:
    """Per frame (column), the range of the finite values across runs (rows); 0 with fewer
    than two."""
    out = np.zeros(values.shape[1])
    for k in range(values.shape[1]):
        col = values[:, k][np.isfinite(values[:, k])]
        if col.size > 1:
            out[k] = float(col.max() - col.min())
    return out


def worse_by(base: np.ndarray, head: np.ndarray, higher_is_better: bool) -> np.ndarray:
    """How much worse head is than base, element-wise (negative: better).

    Equal values (an identical frame's infinite PSNR on both sides included) are 0. NaN on
    head where base is a number is infinitely worse, NaN on base where head is a number
    infinitely better, NaN on both 0: a NaN is never an improvement. A finite value against
    an infinite one is infinitely worse or better.
    """
    b = np.asarray(base, dtype=np.float64)
    h = np.asarray(head, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        d = (b - h) if higher_is_better else (h - b)
    d = np.where(b == h, 0.0, d)
    d = np.where(np.isnan(h) & ~np.isnan(b), np.inf, d)
    d = np.where(np.isnan(b) & ~np.isnan(h), -np.inf, d)
    return np.where(np.isnan(b) & np.isnan(h), 0.0, d)
