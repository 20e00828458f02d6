"""``harness explain``: one page that orders a red run's cases by how likely head caused them,
each with its evidence (new or pre-existing, infrastructure or code, head's changed lines it
executed, where it first left its reference, what differs in the environment).

The order (:func:`likelihood_key`): code failures that execute head's changed lines first
(new before pre-existing, a divergence at a stage before none), then those whose changed
lines are not known, then those that execute none of the change, infrastructure last.

Fields other parts of the harness may add are read from the documents as they are, never
guessed: an attempt's ``reference_layers`` (``status``, ``first_departure``, ``summary``) and
an infrastructure signature (``infra``, ``infra_signature``). Where one is absent the page
says "no layered reference" or "not recorded".
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import ReportFormatError
from harness.model import FAILING, CaseComparison, CaseResult, Comparison, RunReport
from harness.model.coverage import triage_rank
from harness.model.infra import describe, infra_only

# Verdicts of a comparison that leave a case red on head (what a maintainer has to explain).
RED_VERDICTS = frozenset(
    {"regression", "new_failure", "pre_existing_failure", "flaky", "suspect", "missing",
     "not_comparable"}
)  # fmt: skip
_NEW = frozenset({"regression", "new_failure", "suspect"})
RED_STATUSES = frozenset(FAILING | {"flaky", "budget_declined"})
NO_LAYERS = "no layered reference"


@dataclass(frozen=True)
class Explained:
    """One red case and its evidence."""

    name: str
    outcome: str  # the comparison verdict or the run status
    likelihood: str
    origin: str  # new or pre-existing
    cause: str  # infrastructure or code
    change: str  # head's changed lines it executed
    departure: str  # first departure from the reference
    divergence: str | None  # base vs head (comparisons only)
    environment: str
    key: tuple[int, ...] = ()


@dataclass(frozen=True)
class Explanation:
    kind: str  # run, merged run, comparison
    subject: str  # what was explained (the folder)
    title: str
    cases: tuple[Explained, ...]
    others: int  # cases that are not red
    notes: tuple[str, ...] = ()


def _raw_attempts(raw: Mapping[str, Any] | None, case: CaseResult) -> list[Mapping[str, Any]]:
    for c in (raw or {}).get("cases", []):
        if isinstance(c, Mapping) and c.get("id") == case.id and c.get("platform") == case.platform:
            return [a for a in c.get("attempts", []) if isinstance(a, Mapping)]
    return []


def departure(raw: Mapping[str, Any] | None, case: CaseResult | None) -> tuple[str, bool]:
    """Where the case's last attempt with a layered reference first left it, and whether it
    did (``reference_layers``, read as recorded); "no layered reference" when none has one."""
    if case is None:
        return "not recorded (no report of this side)", False
    for a in reversed(_raw_attempts(raw, case)):
        layers = a.get("reference_layers")
        if not isinstance(layers, Mapping):
            continue
        status = str(layers.get("status") or "")
        if status == "no_layered_reference":
            return NO_LAYERS, False
        summary = layers.get("summary") or status or "recorded"
        first = layers.get("first_departure")
        text = str(summary) if not first or str(first) in str(summary) else f"{summary} ({first})"
        return text, status == "departed" or bool(first)
    return NO_LAYERS, False


def _signatures(raw: Mapping[str, Any] | None, case: CaseResult) -> list[str]:
    sigs = [a.infra for a in case.attempts if a.infra]
    for a in _raw_attempts(raw, case):
        extra = a.get("infra_signature")
        if isinstance(extra, str) and extra:
            sigs.append(extra)
    return sigs


def cause(
    report: RunReport | None, raw: Mapping[str, Any] | None, case: CaseResult | None
) -> tuple[str, bool]:
    """Infrastructure or code, and True for infrastructure."""
    if case is None or report is None:
        return "not recorded (no report of this side)", False
    sigs = _signatures(raw, case)
    if sigs and infra_only(case, report.infrastructure):
        sig = max(set(sigs), key=sigs.count)
        return f"infrastructure: {describe(sig)} (every failed attempt); not a code failure", True
    err = next((a.error for a in reversed(case.attempts) if a.error is not None), None)
    what = f"{err.type}: {err.message.splitlines()[0][:200]}" if err and err.message else None
    text = f"code: {what}" if what else f"code ({case.reason or case.status})"
    if sigs:
        text += f"; infrastructure errors on {len(sigs)} attempt(s) too ({describe(sigs[0])})"
    return text, False


def env_text(comparison: Comparison) -> str:
    """The environment difference the comparison recorded, or that there is none."""
    d = comparison.env_diff
    parts: list[str] = []
    if d is not None:
        if d.python is not None:
            parts.append(f"python {d.python[0]} -> {d.python[1]}")
        parts += [f"{k} {b} -> {h}" for k, (b, h) in sorted(d.changed.items())]
        parts += [f"+{k} {v}" for k, v in sorted(d.added.items())]
        parts += [f"-{k} {v}" for k, v in sorted(d.removed.items())]
    fields = [f for f in comparison.env_differences if f not in ("python",)]
    if fields:
        parts.append("differs in " + ", ".join(fields))
    if parts:
        more = f", +{len(parts) - 8} more" if len(parts) > 8 else ""
        return "environments differ in " + ", ".join(parts[:8]) + more
    if d is None and not comparison.same_runner:
        return "not recorded"
    return "none (same runner, same packages)"


def likelihood_key(
    infra: bool, triage: Mapping[str, Any] | None, new: bool | None, diverges: bool
) -> tuple[int, ...]:
    return (
        int(infra),
        triage_rank(triage),
        0 if new else (1 if new is None else 2),
        0 if diverges else 1,
    )


def likelihood(infra: bool, triage: Mapping[str, Any] | None, new: bool | None) -> str:
    if infra:
        return "infrastructure, not head's code"
    rank = triage_rank(triage)
    if rank == 0:
        return (
            "likely head's change"
            if new is not False
            else "touches head's change, but pre-existing"
        )
    if rank == 2:
        return "unlikely head's change: executes none of it"
    if new:
        return "possibly head's change (changed lines not known)"
    return "unlikely head's change: pre-existing" if new is False else "not known"


def _origin(c: CaseComparison) -> tuple[str, bool | None]:
    reason = f": {c.reason}" if c.reason else ""
    if c.verdict in _NEW:
        return f"new on head ({c.verdict}){reason}", True
    if c.verdict == "pre_existing_failure":
        return f"pre-existing: base fails alike{reason}", False
    if c.verdict == "flaky":
        return f"flaky on both sides{reason}", False
    return f"not compared ({c.verdict}){reason}", None


def explain_comparison(
    comparison: Comparison,
    sides: Mapping[str, tuple[RunReport | None, Mapping[str, Any] | None]],
    subject: str,
) -> Explanation:
    """The red cases of ``comparison`` (``sides``: each side's report and its raw JSON)."""
    head, head_raw = sides.get("head", (None, None))
    by_id = {(c.id, c.platform): c for c in (head.cases if head else ())}
    env = env_text(comparison)
    out = []
    for i, c in enumerate(comparison.cases):
        if c.verdict not in RED_VERDICTS:
            continue
        case = by_id.get((c.id, c.platform))
        origin, new = _origin(c)
        why, infra = cause(head, head_raw, case)
        dep, departed = departure(head_raw, case)
        d = c.divergence
        diverges = d.kind in ("stage", "nonfinite", "inputs") or departed
        div = "none" if d.kind == "none" else f"{d.kind} at {d.first or '?'}"
        if comparison.diff is None:
            change = "not recorded (no coverage attempt: --no-coverage or saved runs)"
        elif c.triage:
            change = str(c.triage.get("summary"))
        else:
            change = "not recorded"
        key = (*likelihood_key(infra, c.triage, new, diverges), i)
        out.append(
            Explained(c.name, c.verdict, likelihood(infra, c.triage, new), origin, why, change,
                      dep, div, env, key)
        )  # fmt: skip
    out.sort(key=lambda e: e.key)
    title = (
        f"comparison {comparison.id}: head {comparison.head.rev or comparison.head.run_id} "
        f"vs base {comparison.base.rev or comparison.base.run_id}"
    )
    return Explanation("comparison", subject, title, tuple(out), len(comparison.cases) - len(out))


def explain_run(
    report: RunReport,
    raw: Mapping[str, Any] | None,
    subject: str,
    triage: Mapping[tuple[str, str], Mapping[str, Any]] | None = None,
    triage_note: str | None = None,
) -> Explanation:
    """The red cases of one run or merged run (``triage``: per (case id, platform), the
    triage of its coverage against a diff, when one was asked for)."""
    out = []
    for i, c in enumerate(report.cases):
        if c.status not in RED_STATUSES:
            continue
        why, infra = cause(report, raw, c)
        dep, departed = departure(raw, c)
        t = (triage or {}).get((c.id, c.platform))
        if t is not None:
            change = str(t.get("summary"))
        elif c.coverage is None:
            change = "not recorded (run with --coverage, explain with --base REV)"
        else:
            change = triage_note or "not recorded (explain with --base REV to match the diff)"
        origin = "not known: a single run (harness compare --base REV tells new from pre-existing)"
        key = (*likelihood_key(infra, t, None, departed), i)
        out.append(
            Explained(c.name, c.status, likelihood(infra, t, None), origin, why, change, dep,
                      None, "not recorded (a single run: compare two runs to see it)", key)
        )  # fmt: skip
    out.sort(key=lambda e: e.key)
    kind = "merged run" if report.merged_from else "run"
    notes = tuple(f.line() for f in report.infrastructure)
    title = f"{kind} {report.run_id}"
    return Explanation(kind, subject, title, tuple(out), len(report.cases) - len(out), notes)


def read_raw(path: Path) -> dict[str, Any] | None:
    """A JSON document as it is (for fields this harness's model may not carry)."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def load_explanation(path: Path) -> Explanation:
    """The explanation of a comparison folder, a run folder or a merged run (or the JSON
    document in one)."""
    from harness.report.comparison_io import read_comparison
    from harness.report.io import read_report

    folder = path.parent if path.is_file() else path
    if (folder / "comparison.json").is_file() and path.name != "report.json":
        comparison = read_comparison(folder)
        return explain_comparison(comparison, side_reports(comparison, folder), str(folder))
    if (folder / "report.json").is_file():
        report = read_report(folder)
        return explain_run(report, read_raw(folder / "report.json"), str(folder))
    raise ReportFormatError(
        f"{path}: expected a run folder (report.json), a merged run or a comparison folder "
        "(comparison.json)"
    )


def side_reports(
    comparison: Comparison, folder: Path
) -> dict[str, tuple[RunReport | None, Mapping[str, Any] | None]]:
    """Each side's report of a comparison folder (None where it cannot be read)."""
    from harness.report.io import read_report

    out: dict[str, tuple[RunReport | None, Mapping[str, Any] | None]] = {}
    for side, info in (("base", comparison.base), ("head", comparison.head)):
        path = folder / (info.report or f"{side}/report.json")
        try:
            out[side] = (read_report(path), read_raw(path))
        except (OSError, ReportFormatError):
            out[side] = (None, None)
    return out


__all__ = [
    "Explained",
    "Explanation",
    "explain_comparison",
    "explain_run",
    "load_explanation",
    "side_reports",
]
