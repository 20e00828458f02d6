"""Split a plan over N CI machines by expected duration, the same way on every machine.

Each CI machine computes the split on its own (``harness run --shard i/N``), so the split is a
pure function of its inputs: the plan, the shard count, the batch rule and the recorded
durations. Batches (the unit that stays on one machine, see :data:`BATCH_RULES`) go longest
first onto the least-loaded shard (LPT); ties are broken by batch name and then by the lowest
shard index, never by dict or set order.

Expected seconds per case come from previous reports (per case id and platform, every attempt
summed; the median over several reports) and, where none recorded the case, from an estimate
that says how it was made: the median seconds per run of the recorded cases of the same kind,
else of every recorded case, else a per-kind default, times the case's runs (warm-ups plus
repeats).

Each item also says what it needs of a machine (:class:`Needs`): its rank count (a multi-rank
case's ``ranks``, a server's ``[case.server] ranks``) and its device slots, one per rank on a
platform that pins devices (``pinned``: cuda, hip, npu; none on the CPU). A shard's machine
needs as many as its widest item; that does not move the split, which balances seconds (the
ranks of a case run at once, so a case's seconds are its wall time).

Example::

    plan = split(build_plan(cases, ["cpu"]), 4, recorded_durations([previous_report]))
    plan.items_of(2)      # the plan items shard 2/4 runs, in plan order
    plan.digest           # equal on every machine that was given the same inputs
"""

from __future__ import annotations

import hashlib
import heapq
import json
import re
import statistics
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from harness.cases.plan import PlanItem
from harness.errors import UsageError
from harness.model import PlannedCase, RunReport, ShardInfo

# What stays together on one shard: ``case`` (a case on a platform with its warm-ups,
# repeats and retries, which always run back to back in one worker), ``file`` (every case of
# one case file on a platform) or ``kind`` (every case of one kind on a platform: the batch the
# pytest plugin runs through one worker).
BATCH_RULES: tuple[str, ...] = ("case", "file", "kind")

# Seconds per run when no report recorded any case to estimate from. Rough orders of magnitude
# for the kinds (a loader or dispatch check is quick, a cold import starts an interpreter, a
# pipeline generates frames); only their ratios shape the split.
DEFAULT_RUN_S: Mapping[str, float] = {
    "loader": 1.0,
    "quant": 0.5,
    "import": 2.0,
    "pipeline": 30.0,
    "server": 30.0,
}
_FALLBACK_RUN_S = 1.0

_SPEC = re.compile(r"\s*(\d+)\s*/\s*(\d+)\s*")
MAX_SHARDS = 1000


def parse_shard_spec(spec: str, option: str = "--shard") -> tuple[int, int]:
    """``"2/4"`` -> ``(2, 4)``: 1-based index and count; anything else is a usage error."""
    m = _SPEC.fullmatch(spec)
    if m is None:
        raise UsageError(
            f"{option} {spec!r}: expected INDEX/COUNT with integers, e.g. 2/4, or auto"
        )
    index, count = int(m.group(1)), int(m.group(2))
    if not 1 <= count <= MAX_SHARDS:
        raise UsageError(f"{option} {spec}: the count must be from 1 to {MAX_SHARDS}")
    if not 1 <= index <= count:
        raise UsageError(
            f"{option} {spec}: the index is 1-based and must be from 1 to {count} "
            f"(shard 1/{count} is the first)"
        )
    return index, count


def check_shard_count(count: int, option: str = "--shards") -> int:
    if not 1 <= count <= MAX_SHARDS:
        raise UsageError(f"{option} {count}: expected an integer from 1 to {MAX_SHARDS}")
    return count


@dataclass(frozen=True)
class Recorded:
    """Seconds one case on one platform took in previous reports (all attempts summed)."""

    kind: str
    seconds: float
    runs: int  # first tries of warm-ups and measured runs (retries excluded)

    @property
    def per_run_s(self) -> float:
        return self.seconds / max(self.runs, 1)


def recorded_durations(reports: Iterable[RunReport]) -> dict[tuple[str, str], Recorded]:
    """Per (case id, platform): the summed attempt seconds, the median over the reports that
    ran it. A case with no attempt (skipped) records nothing."""
    seen: dict[tuple[str, str], list[Recorded]] = {}
    for report in reports:
        for c in report.cases:
            if not c.attempts:
                continue
            seen.setdefault((c.id, c.platform), []).append(
                Recorded(
                    c.kind,
                    sum(a.duration_s for a in c.attempts),
                    sum(1 for a in c.attempts if a.retry == 0),
                )
            )
    out = {}
    for key, recs in seen.items():
        runs = round(statistics.median(r.runs for r in recs))
        out[key] = Recorded(recs[0].kind, statistics.median(r.seconds for r in recs), runs)
    return out


@dataclass(frozen=True)
class Expected:
    seconds: float
    estimate: str | None  # None: recorded


def expected_seconds(
    items: Sequence[PlanItem], recorded: Mapping[tuple[str, str], Recorded]
) -> list[Expected]:
    """Expected seconds of each item, recorded or estimated (and how)."""
    per_kind: dict[str, list[float]] = {}
    for r in recorded.values():
        per_kind.setdefault(r.kind, []).append(r.per_run_s)
    every = sorted(s for v in per_kind.values() for s in v)
    out = []
    for item in items:
        case = item.case
        runs = case.warmup + case.repeats
        if item.skip_reason is not None:
            out.append(Expected(0.0, "skipped on this platform: 0 s"))
            continue
        rec = recorded.get((case.id, item.platform))
        if rec is not None:
            out.append(Expected(rec.seconds, None))
            continue
        same = per_kind.get(case.kind)
        if same:
            per_run = statistics.median(same)
            how = f"median of {len(same)} recorded {case.kind} case(s)"
        elif every:
            per_run = statistics.median(every)
            how = f"median of all {len(every)} recorded case(s); none of kind {case.kind}"
        else:
            per_run = DEFAULT_RUN_S.get(case.kind, _FALLBACK_RUN_S)
            how = f"default for {case.kind} (no recorded durations)"
        out.append(Expected(per_run * runs, f"{how}: {per_run:.3g} s/run x {runs} run(s)"))
    return out


@dataclass(frozen=True)
class Needs:
    """What one plan item needs of a machine: its processes (ranks) and device slots."""

    ranks: int
    devices: int  # one per rank where the platform pins devices; 0 elsewhere or when skipped


def needs(item: PlanItem, pinned: Collection[str]) -> Needs:
    """``item``'s rank count and device slots; ``pinned`` names the platforms that pin devices."""
    ranks = item.case.rank_count
    takes = item.platform in pinned and item.skip_reason is None
    return Needs(ranks, ranks if takes else 0)


def batch_name(item: PlanItem, by: str) -> str:
    """The batch an item belongs to under rule ``by`` (see :data:`BATCH_RULES`)."""
    if by == "case":
        return item.name
    if by == "file":
        return f"{item.case.source}[{item.platform}]"
    if by == "kind":
        return f"{item.case.kind}[{item.platform}]"
    raise UsageError(f"--shard-by {by}: expected one of {', '.join(BATCH_RULES)}")


@dataclass(frozen=True)
class ShardPlan:
    """The plan cut into ``count`` shards; ``shard_of[i]`` is the 1-based shard of ``items[i]``."""

    count: int
    by: str
    items: tuple[PlanItem, ...]
    expected: tuple[Expected, ...]
    shard_of: tuple[int, ...]
    digest: str
    nonce: str | None = None
    needs: tuple[Needs, ...] = ()  # per item; empty: not known (every item one rank, no device)

    def need_of(self, i: int) -> Needs:
        return self.needs[i] if self.needs else Needs(self.items[i].case.rank_count, 0)

    def devices_of(self, index: int) -> int:
        """The device slots shard ``index``'s machine needs: those of its widest item."""
        return max(
            (self.need_of(i).devices for i, s in enumerate(self.shard_of) if s == index),
            default=0,
        )

    def items_of(self, index: int) -> list[PlanItem]:
        return [it for it, s in zip(self.items, self.shard_of, strict=True) if s == index]

    def loads(self) -> list[float]:
        """Expected seconds per shard (index 0 is shard 1)."""
        out = [0.0] * self.count
        for e, s in zip(self.expected, self.shard_of, strict=True):
            out[s - 1] += e.seconds
        return out

    def batch_seconds(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for it, e in zip(self.items, self.expected, strict=True):
            name = batch_name(it, self.by)
            out[name] = out.get(name, 0.0) + e.seconds
        return out

    def ideal_s(self) -> float:
        """The best any split can do: total / count, or the largest batch if that is longer."""
        total = sum(e.seconds for e in self.expected)
        return max(total / self.count, max(self.batch_seconds().values(), default=0.0))

    def info(self, index: int | None, source: str | None = None) -> ShardInfo:
        """What a shard's report records: which shard it is (and how it was told), and the
        whole plan."""
        return ShardInfo(
            source=source,
            index=index,
            count=self.count,
            digest=self.digest,
            by=self.by,
            nonce=self.nonce,
            plan=tuple(
                PlannedCase(
                    id=it.case.id,
                    kind=it.case.kind,
                    platform=it.platform,
                    shard=s,
                    expected_s=round(e.seconds, 6),
                    estimate=e.estimate,
                    source=it.case.source,
                )
                for it, e, s in zip(self.items, self.expected, self.shard_of, strict=True)
            ),
        )


def plan_digest(count: int, by: str, assignment: Iterable[tuple[str, int]]) -> str:
    """A digest of which case goes to which shard: equal plans give equal digests, whatever
    the plan's order (``--shuffle`` changes the order a shard runs in, not the split)."""
    doc = {"count": count, "by": by, "cases": sorted(assignment)}
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def split(
    items: Sequence[PlanItem],
    count: int,
    recorded: Mapping[tuple[str, str], Recorded] | None = None,
    *,
    by: str = "case",
    nonce: str | None = None,
    pinned: Collection[str] = (),
) -> ShardPlan:
    """Cut ``items`` into ``count`` shards, longest batch first onto the least-loaded shard.
    ``nonce`` (see :func:`plan_nonce`) is recorded in every shard's report as is; ``pinned``
    names the platforms whose items take a device slot per rank (:class:`Needs`)."""
    check_shard_count(count)
    expected = expected_seconds(items, recorded or {})
    batches: dict[str, list[int]] = {}
    for i, item in enumerate(items):
        batches.setdefault(batch_name(item, by), []).append(i)
    # Summed in a fixed order and rounded, so a shuffled plan splits exactly like an ordered one.
    seconds = {
        name: round(sum(sorted(expected[i].seconds for i in idx)), 6)
        for name, idx in batches.items()
    }
    order = sorted(batches, key=lambda name: (-seconds[name], name))
    heap = [(0.0, index) for index in range(1, count + 1)]  # (load, shard): ties to the lowest
    shard_of = [0] * len(items)
    for name in order:
        load, index = heapq.heappop(heap)
        for i in batches[name]:
            shard_of[i] = index
        heapq.heappush(heap, (load + seconds[name], index))
    digest = plan_digest(count, by, ((it.name, s) for it, s in zip(items, shard_of, strict=True)))
    return ShardPlan(
        count,
        by,
        tuple(items),
        tuple(expected),
        tuple(shard_of),
        digest,
        nonce=nonce,
        needs=tuple(needs(it, pinned) for it in items),
    )


# Where a plan's nonce comes from when --plan-nonce is not given: an environment variable set
# for the whole CI run, so every shard job of one run draws the same one. The run id, not the
# attempt: re-running one failed shard job must still merge with the others.
NONCE_SOURCES: tuple[tuple[str, str], ...] = (
    ("HARNESS_PLAN_NONCE", ""),
    ("GITHUB_RUN_ID", "github-run-"),
    ("CI_PIPELINE_ID", "gitlab-pipeline-"),
    ("BUILDKITE_BUILD_ID", "buildkite-build-"),
)


def plan_nonce(explicit: str | None, environ: Mapping[str, str]) -> str | None:
    """The plan's nonce: ``explicit`` (``--plan-nonce``), else the first of
    :data:`NONCE_SOURCES` set in ``environ``; None when there is none (shards are then told
    apart by their plan digest and git tree only)."""
    if explicit is not None:
        if not explicit.strip():
            raise UsageError("--plan-nonce '': expected a non-empty text, e.g. the CI run id")
        return explicit
    for name, prefix in NONCE_SOURCES:
        value = environ.get(name, "").strip()
        if value:
            return prefix + value
    return None


__all__ = [
    "BATCH_RULES",
    "DEFAULT_RUN_S",
    "Expected",
    "Needs",
    "Recorded",
    "ShardPlan",
    "batch_name",
    "check_shard_count",
    "expected_seconds",
    "needs",
    "parse_shard_spec",
    "plan_digest",
    "plan_nonce",
    "recorded_durations",
    "split",
]
