"""Records of a sharded run: the plan every shard was cut from, and the planned cases that have
no result (``missing``), each with the reason.

A shard's ``report.json`` carries a :class:`ShardInfo` (which part it is, the whole plan with
each case's shard, and the plan's digest) so that ``harness merge`` can check that the shards
were cut from one plan and that every planned case ran somewhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from harness.model.vocab import display_name, json_number

# Why a planned case has no result. ``shard_absent`` and ``not_reported`` leave the run
# incomplete (exit 3: nobody knows how those cases would have done); ``fail_fast`` follows
# from a failure the run already counts (exit 1). (A retry the time budget declined is not
# missing: it is a case result of status ``budget_declined``.)
MissingCause = Literal["fail_fast", "shard_absent", "not_reported"]
MISSING_CAUSES: tuple[str, ...] = ("fail_fast", "shard_absent", "not_reported")
INCOMPLETE_CAUSES: frozenset[str] = frozenset({"shard_absent", "not_reported"})


@dataclass(frozen=True)
class PlannedCase:
    """One case on one platform in a shard plan: its shard (1-based) and expected seconds.

    ``estimate`` is None when the seconds were recorded in a previous report, else how they
    were estimated (e.g. ``median of 7 recorded quant case(s)``).
    """

    id: str
    kind: str
    platform: str
    shard: int
    expected_s: float
    estimate: str | None = None
    source: str = ""

    @property
    def name(self) -> str:
        return display_name(self.kind, self.id, self.platform)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "platform": self.platform,
            "source": self.source,
            "shard": self.shard,
            "expected_s": json_number(self.expected_s),
            "estimate": self.estimate,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> PlannedCase:
        return cls(
            id=d["id"],
            kind=d["kind"],
            platform=d["platform"],
            shard=int(d["shard"]),
            expected_s=float(d["expected_s"]),
            estimate=d.get("estimate"),
            source=d.get("source", ""),
        )


@dataclass(frozen=True)
class ShardInfo:
    """Which part of which plan a report is. ``index`` is 1-based; None in a merged report,
    which covers every shard of the plan."""

    index: int | None
    count: int
    digest: str
    by: str
    plan: tuple[PlannedCase, ...]
    # One xdist worker's part of its shard (``gw0``...): ``pytest -n K --harness-shard i/N``
    # writes one report per worker, and the merge joins the parts of one shard.
    part: str | None = None
    # Drawn once per plan (``--plan-nonce``, ``HARNESS_PLAN_NONCE`` or the CI run's id), so two
    # plans of the same case list are told apart: a shard of another CI run is not merged.
    nonce: str | None = None
    # Where index and count came from: "given" (--shard I/N) or the engine and the variables
    # --shard auto read ("buildkite: BUILDKITE_PARALLEL_JOB=1, ..."); None in a merged report.
    source: str | None = None

    @property
    def label(self) -> str:
        where = f"{self.index}/{self.count}" if self.index is not None else f"all/{self.count}"
        return f"{where} ({self.part})" if self.part else where

    def planned(self, index: int | None = None) -> tuple[PlannedCase, ...]:
        """The planned cases of shard ``index`` (default: this report's shard; all if merged)."""
        want = self.index if index is None else index
        return tuple(p for p in self.plan if want is None or p.shard == want)

    def to_json(self) -> dict[str, Any]:
        part = {"part": self.part} if self.part else {}
        nonce = {"plan_nonce": self.nonce} if self.nonce else {}
        source = {"source": self.source} if self.source else {}
        return {
            "index": self.index,
            "count": self.count,
            "plan_digest": self.digest,
            "by": self.by,
            **part,
            **nonce,
            **source,
            "plan": [p.to_json() for p in self.plan],
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ShardInfo:
        return cls(
            index=d.get("index"),
            count=int(d["count"]),
            digest=d["plan_digest"],
            by=d.get("by", "case"),
            plan=tuple(PlannedCase.from_json(p) for p in d.get("plan", [])),
            part=d.get("part"),
            nonce=d.get("plan_nonce"),
            source=d.get("source"),
        )


@dataclass(frozen=True)
class MissingCase:
    """A planned case with no result, and why (``cause`` is one of :data:`MISSING_CAUSES`)."""

    id: str
    kind: str
    platform: str
    reason: str
    cause: MissingCause
    shard: int | None = None
    source: str = ""

    @property
    def name(self) -> str:
        return display_name(self.kind, self.id, self.platform)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "platform": self.platform,
            "source": self.source,
            "shard": self.shard,
            "cause": self.cause,
            "reason": self.reason,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> MissingCase:
        return cls(
            id=d["id"],
            kind=d["kind"],
            platform=d["platform"],
            reason=d["reason"],
            cause=d["cause"],
            shard=d.get("shard"),
            source=d.get("source", ""),
        )


@dataclass(frozen=True)
class MergedShard:
    """One shard report that went into a merged report: where it came from."""

    index: int
    run_id: str
    path: str
    runner: str = ""
    interrupted: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "run_id": self.run_id,
            "path": self.path,
            "runner": self.runner,
            "interrupted": self.interrupted,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> MergedShard:
        return cls(
            index=int(d["index"]),
            run_id=d["run_id"],
            path=d["path"],
            runner=d.get("runner", ""),
            interrupted=bool(d.get("interrupted", False)),
        )


__all__ = [
    "INCOMPLETE_CAUSES",
    "MISSING_CAUSES",
    "MergedShard",
    "MissingCase",
    "MissingCause",
    "PlannedCase",
    "ShardInfo",
]
