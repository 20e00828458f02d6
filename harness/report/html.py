"""``index.html`` of a run: one self-contained page (its CSS and script inline, its plots inline
SVG) plus an ``images/`` folder beside it, rendered from the :class:`RunReport` with Jinja2
templates (``harness/report/templates/``) and autoescaping on, so every string from a case, an
error or a log is text, never markup. The page loads nothing from the network: its Content
Security Policy allows only its own inline script (by hash), inline styles and local images.

A case's row and heading are HTML; the rest of its section (checks, attempts and errors, stage
latencies, inputs, fingerprints, notes) is data in one ``<script type="application/json">``
block (:mod:`harness.report.detail`) that the page's script draws, as text, when the section is
first opened, and its pictures wait in a ``<template>`` until then. Sections of cases that did
not pass are open (drawn) when the page loads, and those with pictures too in a small run.

Example::

    write_run_html(read_report(run_dir), run_dir, references=Path("references"))
"""

from __future__ import annotations

import base64
import functools
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2
from markupsafe import Markup

from harness.fsio import write_text_atomic
from harness.model import Attempt, CaseResult, RunReport, fmt_number
from harness.report.detail import Strings, case_detail, page_data, seconds
from harness.report.shown import has_media
from harness.report.template_cache import CompiledTemplates

if TYPE_CHECKING:
    from harness.references.store import ReferenceStore
    from harness.report.gallery import Gallery
    from harness.report.images import ImageFolder

LOG_TAIL_CHARS = 4000  # of a worker log or stack dump shown with an attempt
# A case that did not pass is drawn open; one with pictures too when the run is this small (a
# thousand open galleries would load thousands of pictures with the page).
OPEN_GALLERIES_UP_TO = 20
_LOG_IN_MESSAGE = re.compile(r"log: (\S+\.log)")


@functools.cache
def environment() -> jinja2.Environment:
    """The templates, autoescaped (every ``{{ }}`` is HTML-escaped unless it is Markup), and
    compiled once, not in every process (:mod:`harness.report.template_cache`)."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("harness.report", "templates"),
        bytecode_cache=CompiledTemplates(),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["num"] = fmt_number
    env.filters["secs"] = seconds
    env.filters["first_line"] = first_line
    env.globals["script"] = _script()
    return env


@dataclass(frozen=True)
class Script:
    """The page's one script and its CSP hash (only this script may run)."""

    code: Markup
    csp: str


def _script() -> Script:
    code = (Path(__file__).parent / "templates" / "report.js").read_text("utf-8")
    digest = base64.b64encode(hashlib.sha256(code.encode()).digest()).decode()
    return Script(Markup(code), f"'sha256-{digest}'")


def first_line(text: str, limit: int = 160) -> str:
    """A table cell's summary of a text: its first line, cut at ``limit`` characters, with
    `` ...`` where anything was left out (the case's section shows the whole)."""
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    if not lines:
        return ""
    cut = lines[0][:limit]
    return cut + (" ..." if len(lines) > 1 or len(lines[0]) > limit else "")


def duration(started: str, finished: str) -> float | None:
    try:
        return (datetime.fromisoformat(finished) - datetime.fromisoformat(started)).total_seconds()
    except (TypeError, ValueError):
        return None


class Logs:
    """Tails of the worker logs and stack dumps under ``<run>/workers/``, read once each."""

    def __init__(self, run_dir: Path) -> None:
        self.dir = run_dir / "workers"
        self._cache: dict[str, str] = {}

    def tail(self, name: str) -> str:
        if name not in self._cache:
            try:
                data = (self.dir / name).read_bytes()[-LOG_TAIL_CHARS:]
                self._cache[name] = data.decode("utf-8", "replace")
            except OSError:
                self._cache[name] = ""
        return self._cache[name]

    def for_attempt(self, a: Attempt) -> list[tuple[str, str]]:
        """(file name, tail) of the log an attempt's error names, and its stack dump."""
        if a.error is None:
            return []
        out = []
        for raw in _LOG_IN_MESSAGE.findall(a.error.message):
            name = Path(raw).name  # the folder may have moved (a downloaded artifact)
            for n in (name, name.removesuffix(".log") + ".stacks"):
                text = self.tail(n)
                if text.strip():
                    out.append((n, text))
        return out

    def all(self) -> list[tuple[str, str]]:
        if not self.dir.is_dir():
            return []
        return [(p.name, t) for p in sorted(self.dir.iterdir()) if (t := self.tail(p.name)).strip()]


@dataclass(frozen=True)
class CaseView:
    """One case as the template shows it: its row and its section's heading; the rest of its
    section is :mod:`harness.report.detail` data the page draws when the section opens."""

    anchor: str
    index: int
    c: CaseResult
    duration_s: float
    checks_passed: int
    gallery: Gallery | None
    open: bool  # drawn open when the page loads


def case_view(
    i: int,
    c: CaseResult,
    run_dir: Path,
    store: ReferenceStore | None,
    folder: ImageFolder | None,
    n_cases: int,
) -> CaseView:
    gallery = None
    if folder is not None:  # some case of the page has media (run_gallery: None for the rest)
        from harness.report.gallery import run_gallery

        gallery = run_gallery(c, run_dir, store, folder, f"c{i}")
    return CaseView(
        anchor=f"case-{i}",
        index=i,
        c=c,
        duration_s=sum(a.duration_s for a in c.attempts),
        checks_passed=sum(1 for k in c.checks if k.passed),
        gallery=gallery,
        open=c.status != "passed" or (gallery is not None and n_cases <= OPEN_GALLERIES_UP_TO),
    )


def _git(env: Mapping[str, Any]) -> str:
    git = env.get("git") if isinstance(env, Mapping) else None
    if not isinstance(git, Mapping) or not git.get("sha"):
        return "-"
    return str(git["sha"])[:12] + (" (dirty)" if git.get("dirty") else "")


def render_run_html(report: RunReport, run_dir: Path, *, references: Path | None = None) -> str:
    """The page of ``report`` (whose outputs live under ``run_dir``); the frames it shows are
    written into ``run_dir/images/`` as it goes."""
    refs = references if references is not None and references.is_dir() else None
    store = folder = None
    # The gallery's modules (numpy, PyAV, the reference store) only for a page that draws media.
    if any(has_media(c) for c in report.cases):
        from harness.references.store import ReferenceStore
        from harness.report.images import ImageFolder

        folder = ImageFolder(run_dir)
        store = ReferenceStore(refs) if refs is not None else None
    logs = Logs(run_dir)
    n = len(report.cases)
    views = [case_view(i, c, run_dir, store, folder, n) for i, c in enumerate(report.cases)]
    strings = Strings()
    details = [case_detail(c, logs, strings) for c in report.cases]
    platforms = sorted({c.platform for c in report.cases})
    simulated = sum(1 for c in report.cases if c.simulated)
    summary = {
        "counts": {k: v for k, v in report.counts().items() if v},
        "runner": report.runner,
        "platforms": ", ".join(platforms) or "-",
        "simulated": simulated,
        "real": len(report.cases) - simulated,
        "git": _git(report.env),
        "duration_s": duration(report.started_at, report.finished_at),
        "started_at": report.started_at,
    }
    return (
        environment()
        .get_template("run.j2")
        .render(
            report=report,
            summary=summary,
            cases=views,
            filters={
                "status": sorted({c.status for c in report.cases}),
                "kind": sorted({c.kind for c in report.cases}),
                "platform": platforms,
            },
            worker_logs=logs.all(),
            data=page_data(strings, details),
            references=str(refs) if refs is not None else None,
        )
    )


def write_run_html(report: RunReport, run_dir: Path, *, references: Path | None = None) -> Path:
    """``run_dir/index.html`` (and its images), built in memory before it replaces the file."""
    page = render_run_html(report, run_dir, references=references)
    path = run_dir / "index.html"
    write_text_atomic(path, page)
    return path
