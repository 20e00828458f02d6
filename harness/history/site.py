"""``harness history site``: the history as static, self-contained HTML.

``index.html`` lists the latest change points first (newest step first), then every case with
a sparkline per series, per runner class; ``cases/<case>.html`` shows, per runner class, each
stage's and check's series and the pass rate over the runs with change points marked over
their range, the flake rate over the last 7 and 30 runs, and the recent runs with links to
their run folders. Pages are Jinja2 templates (autoescaped) with inline CSS and inline SVG and
no script; the Content Security Policy is the reports' (nothing loads from the network).

Only the newest ``last`` runs of each runner class are drawn and analysed (default 200): a
page of every run since the project began would grow without bound. A change point is marked
when its p-value meets ``max_pvalue`` divided by the number of series (Bonferroni, as
``history check`` does).

Example::

    summary = build_site(db, Path("site"))
"""

from __future__ import annotations

import functools
import os
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jinja2

from harness.fsio import slug, write_text_atomic
from harness.history.detect import DEFAULT, ChangePoint, Settings, change_points, family_pvalue
from harness.history.series import Group, RunInfo, Series, case_runs, load_series, runs_of
from harness.history.svg import chart, sparkline

__all__ = ["SiteSummary", "build_site", "flake_rate"]

CSP = "default-src 'none'; img-src 'self' file: data:; style-src 'unsafe-inline'; script-src 'none'"


@dataclass
class SiteSummary:
    pages: int = 0
    series: int = 0
    change_points: int = 0
    bytes: int = 0
    files: list[Path] = field(default_factory=list)


@functools.cache
def _env() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.ChoiceLoader(
            [
                jinja2.PackageLoader("harness.history", "templates"),
                jinja2.PackageLoader("harness.report", "templates"),  # report.css
            ]
        ),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )


def flake_rate(statuses: list[tuple[str, bool]], last: int) -> str:
    """Flaky runs among the case's ``last`` runs, e.g. ``1/7 (14 %)``."""
    window = statuses[-last:]
    if not window:
        return "-"
    flaky = sum(1 for _status, f in window if f)
    return f"{flaky}/{len(window)} ({flaky / len(window):.0%})"


def _unit(series: Series) -> str:
    return "s" if series.key.kind == "stage" else ("" if series.key.kind == "check" else "share")


def _run_link(out: Path, run: RunInfo) -> str:
    """The run's page, else its report.json, relative to the case pages."""
    folder = Path(run.folder)
    target = folder / "index.html"
    if not target.is_file():
        target = folder / "report.json"
    return os.path.relpath(target, out.resolve() / "cases")


def build_site(
    db: sqlite3.Connection,
    out: Path,
    *,
    last: int = 200,
    settings: Settings = DEFAULT,
    db_label: str = "",
    say: Callable[[str], None] = lambda _l: None,
) -> SiteSummary:
    summary = SiteSummary()
    all_series = load_series(db, last=last)
    cps: dict[int, list[ChangePoint]] = {}
    threshold = family_pvalue(settings, len(all_series))
    for i, s in enumerate(all_series):
        cps[i] = [c for c in change_points(s, settings) if c.pvalue <= threshold]
    say(f"{len(all_series)} series, {sum(map(len, cps.values()))} change point(s)")
    by_case: dict[str, list[int]] = {}
    for i, s in enumerate(all_series):
        by_case.setdefault(s.key.case, []).append(i)
    group_runs: dict[Group, list[RunInfo]] = {}
    env = _env()
    pages = out / "cases"
    pages.mkdir(parents=True, exist_ok=True)
    case_rows: list[dict[str, Any]] = []
    for case, idxs in sorted(by_case.items()):
        page = f"{slug(case)}.html"
        groups: dict[Group, list[int]] = {}
        for i in idxs:
            groups.setdefault(all_series[i].key.group, []).append(i)
        sections = []
        for group, gidx in groups.items():
            if group not in group_runs:
                group_runs[group] = runs_of(db, group, last)
            rows = case_runs(db, group, case, group_runs[group])
            statuses = [(status, flaky) for _r, status, _a, _m, _p, flaky, _f in rows]
            charts = [
                {
                    "series": all_series[i],
                    "svg": chart(all_series[i], cps[i], _unit(all_series[i])),
                    "unit": {"s": "seconds", "share": "share of measured runs"}.get(
                        _unit(all_series[i]), ""
                    ),
                    "cps": cps[i],
                }
                for i in sorted(gidx, key=lambda i: _order(all_series[i]))
            ]
            sections.append(
                {
                    "group": group,
                    "charts": charts,
                    "flake7": flake_rate(statuses, 7),
                    "flake30": flake_rate(statuses, 30),
                    "latest": statuses[-1][0] if statuses else "-",
                    "runs": [
                        {
                            "run": r,
                            "status": status,
                            "attempts": att,
                            "measured": meas,
                            "passed": passed,
                            "flaky": flaky,
                            "href": _run_link(out, r),
                        }
                        for r, status, att, meas, passed, flaky, _f in reversed(rows[-30:])
                    ],
                    "sparks": [
                        (all_series[i].key.metric, sparkline(all_series[i], cps[i]))
                        for i in sorted(gidx, key=lambda i: _order(all_series[i]))
                    ],
                }
            )
        html = env.get_template("case.j2").render(
            case=case, sections=sections, csp=CSP, generated=_now(), db=db_label, last=last
        )
        write_text_atomic(pages / page, html)
        summary.files.append(pages / page)
        case_rows.append({"case": case, "href": f"cases/{page}", "sections": sections})
    latest = sorted(
        (cp for found in cps.values() for cp in found),
        key=lambda c: (c.after.run.started_at, c.regression),
        reverse=True,
    )
    html = env.get_template("index.j2").render(
        cases=case_rows,
        latest=latest[:100],
        more=max(len(latest) - 100, 0),
        csp=CSP,
        generated=_now(),
        db=db_label,
        last=last,
        runs=sum(len(v) for v in group_runs.values()),
        page_of={c["case"]: c["href"] for c in case_rows},
    )
    write_text_atomic(out / "index.html", html)
    summary.files.append(out / "index.html")
    summary.pages = len(summary.files)
    summary.series = len(all_series)
    summary.change_points = len(latest)
    summary.bytes = sum(f.stat().st_size for f in summary.files)
    return summary


def _order(s: Series) -> tuple[int, str]:
    rank = {"pass": 0, "stage": 1, "check": 2}[s.key.kind]
    return (rank, "" if s.key.metric == "total" else s.key.metric)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
