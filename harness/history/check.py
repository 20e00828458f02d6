"""``harness history check``: the change points that new runs brought, with what pins each.

New runs are the runs of the latest ingest (or, with ``since``, every run after the last run
of that commit or run id); a change point is new when the first run after its step is new.
Each is printed with its commit range, its size and significance, a first-divergence hint
where both sides of the step recorded fingerprints (the first input, then the first stage
fingerprint, whose hash differs between the last run before and the first run after), an
environment change within the range, and the ``harness bisect`` command line that would pin it.

Only the new runs of each series and ``context`` runs before them are analysed: what is new
lies at the end, and a step further back was reported when it was new. A new change point must
be significant at ``max_pvalue`` divided by the number of series analysed (Bonferroni over
the family a check looks at): with a thousand noisy series, p <= 0.001 each would raise a false
alarm nearly every night (measured: 2 false regressions in the last 10 of 260 unchanged runs
of 1,080 series at 5 % noise).

Example::

    report = check(db, since=None)
    print(render(report)); sys.exit(1 if report.regressions else 0)
"""

from __future__ import annotations

import json
import re
import shlex
import sqlite3
from dataclasses import dataclass, field

from harness.errors import InputError
from harness.history.detect import DEFAULT, ChangePoint, Settings, change_points, family_pvalue
from harness.history.series import load_series

__all__ = ["CheckReport", "Finding", "bisect_command", "check", "divergence", "render"]

_NAME = re.compile(r"(?P<kind>[^/]+)/(?P<id>.+)\[(?P<platform>[^\]]+)\]( simulated)?")


@dataclass(frozen=True)
class Finding:
    cp: ChangePoint
    divergence: str
    env_changed: str
    bisect: str


@dataclass
class CheckReport:
    new_runs: int
    since: str
    findings: list[Finding] = field(default_factory=list)
    series: int = 0
    max_pvalue: float = 0.0  # what a new change point had to meet (Bonferroni over series)

    @property
    def regressions(self) -> list[Finding]:
        return [f for f in self.findings if f.cp.regression]


def _new_runs(db: sqlite3.Connection, since: str | None) -> tuple[set[int], str]:
    if since is None:
        row = db.execute("SELECT max(batch) FROM runs").fetchone()
        if row is None or row[0] is None:
            return set(), "the latest ingest (none yet)"
        pks = {r[0] for r in db.execute("SELECT id FROM runs WHERE batch = ?", (row[0],))}
        return pks, f"the latest ingest ({len(pks)} run(s))"
    if not since.strip():
        raise InputError("--since '': expected a commit (full or a prefix) or a run id")
    cut = db.execute(
        "SELECT max(started_at) FROM runs WHERE run_id = ? OR commit_sha LIKE ?",
        (since, since.lower() + "%"),
    ).fetchone()[0]
    if cut is None:
        raise InputError(
            f"--since {since}: no ingested run has that commit or run id (history check "
            "compares with runs in the database)"
        )
    pks = {r[0] for r in db.execute("SELECT id FROM runs WHERE started_at > ?", (cut,))}
    return pks, f"runs after {since} ({len(pks)} run(s))"


def _fingerprints(db: sqlite3.Connection, run_pk: int, case: str) -> dict[str, dict[str, str]]:
    row = db.execute(
        "SELECT fingerprints FROM cases WHERE run = ? AND name = ?", (run_pk, case)
    ).fetchone()
    doc = json.loads(row[0]) if row else {}
    return doc if isinstance(doc, dict) else {}


def divergence(before: dict[str, dict[str, str]], after: dict[str, dict[str, str]]) -> str:
    """Where the two sides first differ: an input, then a stage fingerprint, in order."""
    if not before or not after or not (before.get("stages") or before.get("inputs")):
        return "no hint: one side of the step has no fingerprints (no passing run recorded any)"
    for what, label in (("inputs", "input"), ("stages", "stage fingerprint")):
        b, a = before.get(what, {}), after.get(what, {})
        for name in list(b) + [n for n in a if n not in b]:
            if b.get(name) != a.get(name):
                return f"first divergence: {label} {name!r} differs across the step"
    return "no divergence: same inputs and fingerprints on both sides (timing only)"


def bisect_command(cp: ChangePoint) -> str:
    """The ``harness bisect`` line that would pin ``cp``'s step (harness/cli/bisect.py)."""
    key = cp.series.key
    m = _NAME.fullmatch(key.case)
    case_id, platform = (m["id"], m["platform"]) if m else (key.case, "")
    good = cp.before.run.commit or cp.before.run.run_id
    bad = cp.after.run.commit or cp.after.run.run_id
    argv = ["harness", "bisect", "--good", good[:12], "--bad", bad[:12], case_id]
    argv += ["--runner", key.group.runner]
    if platform:
        argv += ["--platform", platform]
    return shlex.join(argv)


def check(
    db: sqlite3.Connection,
    *,
    since: str | None = None,
    settings: Settings = DEFAULT,
    context: int = 60,
) -> CheckReport:
    new, said = _new_runs(db, since)
    report = CheckReport(new_runs=len(new), since=said)
    if not new:
        return report
    all_series = load_series(db, last=len(new) + context)
    report.series = len(all_series)
    report.max_pvalue = family_pvalue(settings, len(all_series))
    for series in all_series:
        for cp in change_points(series, settings):
            if cp.after.run.pk not in new or cp.pvalue > report.max_pvalue:
                continue
            case = series.key.case
            before = _fingerprints(db, cp.before.run.pk, case)
            after = _fingerprints(db, cp.after.run.pk, case)
            envs = ""
            if cp.before.run.env_digest != cp.after.run.env_digest:
                envs = (
                    f"environment changed within the range ({cp.before.run.env_digest} -> "
                    f"{cp.after.run.env_digest}): compare the two runs' env before bisecting"
                )
            report.findings.append(Finding(cp, divergence(before, after), envs, bisect_command(cp)))
    report.findings.sort(
        key=lambda f: (not f.cp.regression, f.cp.after.run.started_at, f.cp.series.key.case),
        reverse=False,
    )
    return report


def _label(cp: ChangePoint) -> str:
    if cp.regression:
        return "REGRESSION"
    return "improvement" if cp.improvement else "change"


def render(report: CheckReport) -> str:
    """One block per case and step (its series that stepped at the same runs together)."""
    lines = [
        f"history check: {report.since}; {report.series} series analysed (p <= "
        f"{report.max_pvalue:.2g} each); {len(report.findings)} new change point(s), "
        f"{len(report.regressions)} regression(s)"
    ]
    blocks: dict[tuple[str, str, int, int], list[Finding]] = {}
    for f in report.findings:
        k = f.cp.series.key
        blocks.setdefault(
            (k.group.label, k.case, f.cp.before.run.pk, f.cp.after.run.pk), []
        ).append(f)
    for (group, case, _b, _a), found in blocks.items():
        first = found[0]
        b, a = first.cp.before.run, first.cp.after.run
        worst = "REGRESSION" if any(f.cp.regression for f in found) else _label(first.cp)
        lines.append(
            f"{worst} {case} on {group}: {(b.commit or '?')[:12]}..{(a.commit or '?')[:12]} "
            f"(last run before: {b.run_id}, first after: {a.run_id})"
        )
        for f in found:
            cp = f.cp
            lines.append(
                f"  {_label(cp):11} {cp.series.key.kind} {cp.series.key.metric}: "
                f"{cp.step_text()} (p = {cp.pvalue:.2g}; {cp.mean_before:.4g} -> "
                f"{cp.mean_after:.4g})"
            )
        lines.append(f"  {first.divergence}")
        if first.env_changed:
            lines.append(f"  {first.env_changed}")
        lines += [f"  pin it: {first.bisect}", f"  runs: {b.folder} {a.folder}"]
    return "\n".join(lines)
