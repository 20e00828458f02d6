"""What a multi-rank attempt recorded beside rank 0's record: every rank's stage seconds, how
each rank ended, and whether the fingerprints declared replicated agreed across ranks.

Written by :mod:`harness.worker.ranks_case` on the attempt (``Attempt.ranks``, in report.json
only when set). Rank 0's stages, fingerprints, notes and outputs are the attempt's own; the
other ranks' fingerprints are the attempt's too, prefixed ``rank<R>.``; their stage seconds
are here (and the notes ``rank<R>.<stage>``). :func:`slowest` gives the report's
slowest-rank-per-stage table.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# A fingerprint of rank R > 0 is recorded on the attempt under this prefix.
RANK_PREFIX = "rank{rank}."


@dataclass(frozen=True)
class RanksRecord:
    """One multi-rank attempt's per-rank record."""

    world_size: int
    master_port: int
    # rank -> stage -> wall seconds (str keys: JSON), rank 0 included
    stages: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    # rank -> its exit: "exit 0", "exit 1", "killed by signal SIGKILL", "running at the kill"
    exits: Mapping[str, str] = field(default_factory=dict)
    # rank -> the devices it was pinned to ("" when the platform pins nothing)
    devices: Mapping[str, str] = field(default_factory=dict)
    # the case's ``replicated`` patterns, and what the rank-consistency check found
    replicated: tuple[str, ...] = ()
    consistency: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "world_size": self.world_size,
            "master_port": self.master_port,
            "stages": {r: dict(s) for r, s in self.stages.items()},
            "exits": dict(self.exits),
            "devices": dict(self.devices),
            "replicated": list(self.replicated),
            "consistency": self.consistency,
        }

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> RanksRecord:
        return RanksRecord(
            world_size=int(d["world_size"]),
            master_port=int(d.get("master_port", 0)),
            stages={str(r): dict(s) for r, s in d.get("stages", {}).items()},
            exits=dict(d.get("exits", {})),
            devices=dict(d.get("devices", {})),
            replicated=tuple(d.get("replicated", ())),
            consistency=str(d.get("consistency", "")),
        )


def slowest(record: RanksRecord) -> list[tuple[str, int, float, dict[int, float]]]:
    """Per stage (in rank 0's order, then stages only other ranks have): the slowest rank, its
    seconds, and every rank's seconds."""
    order: dict[str, None] = {}
    by_rank = {int(r): s for r, s in record.stages.items()}
    for r in sorted(by_rank):
        order.update(dict.fromkeys(by_rank[r]))
    rows = []
    for stage in order:
        seconds = {r: float(s[stage]) for r, s in sorted(by_rank.items()) if stage in s}
        rank = max(seconds, key=lambda r: (seconds[r], -r))
        rows.append((stage, rank, seconds[rank], seconds))
    return rows


@dataclass(frozen=True)
class Consistency:
    """The rank-consistency verdict: ``passed`` None when nothing declared replicated was
    recorded by two ranks (not run), ``compared`` the fingerprint names compared,
    ``mismatches`` one line per name whose ranks disagree."""

    passed: bool | None
    compared: tuple[str, ...]
    mismatches: tuple[str, ...]
    reason: str


def _same(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Two fingerprint descriptions agree: same content hash where both have one, else the
    same description apart from where the tensor lived."""
    if "hash" in a and "hash" in b:
        return bool(a["hash"] == b["hash"])
    strip = ("device",)
    return {k: v for k, v in a.items() if k not in strip} == {
        k: v for k, v in b.items() if k not in strip
    }


def check_consistency(
    per_rank: Mapping[int, Mapping[str, Mapping[str, Any]]], patterns: Sequence[str]
) -> Consistency:
    """Compare every fingerprint matching one of ``patterns`` (``fnmatch``, against the name
    as the rank recorded it) across all ranks (rank -> name -> description)."""
    ranks = sorted(per_rank)
    names: dict[str, None] = {}
    for r in ranks:
        names.update(
            dict.fromkeys(
                n for n in per_rank[r] if any(fnmatch.fnmatchcase(n, p) for p in patterns)
            )
        )
    compared, mismatches = [], []
    for name in names:
        have = [r for r in ranks if name in per_rank[r]]
        missing = [r for r in ranks if name not in per_rank[r]]
        if missing:
            mismatches.append(f"{name}: not recorded by rank(s) {missing}")
            continue
        compared.append(name)
        first = per_rank[have[0]][name]
        differ = [r for r in have[1:] if not _same(first, per_rank[r][name])]
        if differ:
            hashes = ", ".join(f"rank {r}: {per_rank[r][name].get('hash', '?')}" for r in have)
            mismatches.append(f"{name} differs ({hashes})")
    if not compared and not mismatches:
        return Consistency(
            None,
            (),
            (),
            f"no fingerprint matching replicated = {list(patterns)} was recorded by the ranks",
        )
    if mismatches:
        reason = f"{len(mismatches)} of {len(names)} replicated fingerprint(s) disagree: " + (
            "; ".join(mismatches)
        )
        return Consistency(False, tuple(compared), tuple(mismatches), reason)
    return Consistency(
        True,
        tuple(compared),
        (),
        f"{len(compared)} replicated fingerprint(s) agree across {len(ranks)} ranks",
    )
