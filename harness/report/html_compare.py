"""``index.html`` of a comparison, from ``comparison.json`` and the two side reports it names:
the verdict per case, per-stage latency strip plots with the rounds in the order they ran (so
drift and the pairing of base and head show), ratio and interval, the quality findings, the
failure matrix, the first divergence in words, and for pipeline cases the reference, base and
head frames with a heat map of |head - base|.

Example::

    write_comparison_html(comparison, out_dir, references=Path("references"))
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from markupsafe import Markup

from harness.errors import HarnessError
from harness.fsio import write_text_atomic
from harness.model import CaseComparison, CaseResult, Comparison, RunReport, fmt_number
from harness.references.store import ReferenceStore
from harness.report.comparison_md import triage_cell
from harness.report.gallery import Gallery, comparison_gallery
from harness.report.html import duration, environment
from harness.report.images import ImageFolder
from harness.report.io import read_report
from harness.report.plots import Point, strip_plot


def _pct(x: Any) -> str:
    return "-" if not isinstance(x, int | float) else f"{x - 1:+.1%}"


def divergence_words(c: CaseComparison) -> str:
    """The first-divergence finding as a sentence."""
    d = c.divergence
    detail = d.detail
    first = d.first or "?"
    if d.kind == "none":
        return (
            "No divergence: every input hash, intermediate fingerprint and output hash the "
            "target recorded is identical on base and head."
        )
    if d.kind == "missing":
        return f"Not walked: {detail.get('reason', 'a side recorded nothing to compare')}."
    if d.kind == "inputs":
        return (
            f"The inputs already differ: '{first}' has another hash on head than on base. "
            "That is input or runtime drift (data, noise, seed handling), not a model change."
        )
    bound = detail.get("max_abs_diff_at_least")
    size = f"; the largest absolute difference is at least {fmt_number(bound)}" if bound else ""
    step = f" at step {detail['step']}" if "step" in detail else ""
    if d.kind == "nonfinite":
        side = detail.get("side", "?")
        return (
            f"'{first}'{step} is the first tensor that differs and it holds NaN/Inf on {side} "
            f"(base {detail.get('nonfinite_base', 0)}, head {detail.get('nonfinite_head', 0)} "
            f"non-finite values){size}."
        )
    if first.startswith("output:"):
        return (
            "Every recorded intermediate tensor is identical; the first difference is the "
            f"output '{first.removeprefix('output:')}'."
        )
    why = f" ({detail['reason']})" if "reason" in detail else ""
    later = (
        f" NaN/Inf first appear later, at '{detail['first_nonfinite']}'."
        if "first_nonfinite" in detail
        else ""
    )
    return (
        f"Base and head first differ at '{first}'{step}{why}: everything recorded before it is "
        f"identical{size}.{later}"
    )


@dataclass(frozen=True)
class StageView:
    s: Any  # StageLatency
    plot: Markup


@dataclass(frozen=True)
class CaseCompView:
    anchor: str
    c: CaseComparison
    stages: tuple[StageView, ...]
    divergence: str
    gallery: Gallery | None
    triage: str = "-"  # which of head's changed lines it executed (comparison_md.triage_cell)


def _points(base: CaseResult | None, head: CaseResult | None) -> dict[str, list[Point]]:
    out: dict[str, list[Point]] = {}
    for side, case in (("base", base), ("head", head)):
        if case is None:
            continue
        for a in case.attempts:
            if a.warmup or a.status != "passed":
                continue
            for stage, secs in [*a.stages.items(), ("total", a.duration_s)]:
                out.setdefault(stage, []).append(Point(side, a.round, a.started_at, secs))
    return out


def _side(comparison_dir: Path, report: str | None) -> tuple[RunReport | None, Path, str | None]:
    """A side's report (its path is relative to the comparison's folder), its folder, or why
    it cannot be read."""
    if not report:
        return None, comparison_dir, "the comparison names no report for this side"
    path = comparison_dir / report
    folder = path if path.is_dir() else path.parent
    try:
        return read_report(path), folder, None
    except HarnessError as exc:
        return None, folder, str(exc)


def render_comparison_html(
    comparison: Comparison, comparison_dir: Path, *, references: Path | None = None
) -> str:
    store = ReferenceStore(references) if references is not None and references.is_dir() else None
    folder = ImageFolder(comparison_dir)
    base, base_dir, base_err = _side(comparison_dir, comparison.base.report)
    head, head_dir, head_err = _side(comparison_dir, comparison.head.report)
    index: dict[str, dict[tuple[str, str], CaseResult]] = {
        side: {(c.id, c.platform): c for c in rep.cases} if rep else {}
        for side, rep in (("base", base), ("head", head))
    }
    views = []
    for i, c in enumerate(comparison.cases):
        b, h = index["base"].get((c.id, c.platform)), index["head"].get((c.id, c.platform))
        points = _points(b, h)
        stages = tuple(
            StageView(
                s,
                strip_plot(
                    s.stage,
                    points.get(s.stage, []),
                    caption=f"{s.verdict} {_pct(s.ratio)} [{_pct(s.ci_low)}, {_pct(s.ci_high)}]",
                )
                if s.judged
                else Markup(""),
            )
            for s in c.latency
        )
        gallery = comparison_gallery(b, h, (base_dir, head_dir), store, folder, f"c{i}")
        views.append(
            CaseCompView(f"case-{i}", c, stages, divergence_words(c), gallery, triage_cell(c))
        )
    summary: Mapping[str, Any] = {
        "counts": {k: v for k, v in comparison.counts().items() if v},
        "duration_s": duration(comparison.started_at, comparison.finished_at),
    }
    return (
        environment()
        .get_template("comparison.j2")
        .render(
            comparison=comparison,
            summary=summary,
            cases=views,
            side_errors=[
                f"{side} report: {err}"
                for side, err in (("base", base_err), ("head", head_err))
                if err
            ],
            filters={
                "verdict": sorted({c.verdict for c in comparison.cases}),
                "kind": sorted({c.kind for c in comparison.cases}),
                "platform": sorted({c.platform for c in comparison.cases}),
            },
            pct=_pct,
            references=str(references) if store is not None else None,
        )
    )


def write_comparison_html(
    comparison: Comparison, comparison_dir: Path, *, references: Path | None = None
) -> Path:
    """``comparison_dir/index.html`` and its images."""
    page = render_comparison_html(comparison, comparison_dir, references=references)
    path = comparison_dir / "index.html"
    write_text_atomic(path, page)
    return path
