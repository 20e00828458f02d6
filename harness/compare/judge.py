"""One case's verdict from its two sides: latency, quality, failures and first divergence.

The case verdict is the worst of the three (:data:`harness.model.comparison.VERDICTS`);
latency is judged only when both sides passed every measured run, since a failing run has no
meaningful timing and its failure is already the finding.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from harness.compare.divergence import first_divergence, pick
from harness.compare.failures import failure_matrix
from harness.compare.latency import case_verdict
from harness.compare.quality import quality_findings, quality_verdict
from harness.model import (
    Case,
    CaseComparison,
    CaseResult,
    StageLatency,
    worst_verdict,
)


def judge_case(
    base: CaseResult | None,
    head: CaseResult | None,
    *,
    case: Case | None,
    latency: Sequence[StageLatency],
    base_root: Path,
    head_root: Path,
    profile_margins: Mapping[str, float] | None = None,
    alpha: float = 0.05,
    rounds: int = 0,
    references: Path | None = None,
    provenance: str | None = None,
) -> CaseComparison:
    """The comparison of one case; ``latency`` holds its (confirmed) stage verdicts and
    ``references`` is the store the runs' quality checks read. ``provenance``: why a side did
    not run its own code (:mod:`.provenance`), which makes the case ``not_comparable`` with
    that reason first."""
    ref = head or base
    assert ref is not None, "judge_case needs at least one side"
    failures = failure_matrix(
        base, head, alpha=alpha, known_flaky=case.known_flaky if case is not None else None
    )
    b_att = base.attempts if base else ()
    h_att = head.attempts if head else ()
    divergence = first_divergence(pick(b_att), pick(h_att))
    quality = quality_findings(
        case,
        b_att,
        h_att,
        base_root=base_root,
        head_root=head_root,
        profile_margins=profile_margins,
        references=references,
        simulated=any(r.simulated for r in (base, head) if r is not None),
    )
    q_verdict = quality_verdict(quality)
    if failures.verdict == "no_change":
        l_verdict = case_verdict(latency)
        # no judged stage (all too short to time) is no latency finding, not a missing side
        parts = [failures.verdict, q_verdict, l_verdict if l_verdict != "missing" else "no_change"]
    else:
        l_verdict = "skipped" if failures.verdict == "skipped" else "missing"
        parts = [failures.verdict, q_verdict]
    verdict = "not_comparable" if provenance else worst_verdict(parts)
    reasons = [provenance] if provenance else []
    if failures.reason and failures.verdict != "no_change":
        reasons.append(failures.reason)
    for f in quality:
        if f.verdict in ("regression", "improvement"):
            reasons.append(f"{f.metric}({f.output}) {f.verdict}: {f.reason}")
    for s in latency:
        if s.judged and s.verdict in ("regression", "suspect", "improvement"):
            reasons.append(f"{s.stage} {s.reason}")
    if divergence.kind not in ("none", "missing"):
        reasons.append(f"first divergence: {divergence.kind} at {divergence.first}")
    return CaseComparison(
        id=ref.id,
        kind=ref.kind,
        platform=ref.platform,
        verdict=verdict,
        latency_verdict=l_verdict,
        quality_verdict=q_verdict,
        failures=failures,
        divergence=divergence,
        latency=tuple(latency),
        quality=tuple(quality),
        rounds=rounds,
        unstable=any(s.unstable for s in latency),
        reason="; ".join(reasons) or None,
    )
