"""Writing and reading run folders: ``report.json``, ``junit.xml``, ``summary.md``,
``index.html`` (and its ``images/``), ``latest``.

Every file is written under a temporary name and renamed, so a reader never sees half a file.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from harness.errors import ReportFormatError
from harness.fsio import write_json_atomic, write_text_atomic
from harness.model import SCHEMA_VERSION, RunReport
from harness.report.junit import write_junit
from harness.report.markdown import summary_markdown
from harness.report.schema import read_document, validate_report


def _point_latest(run_dir: Path) -> None:
    latest = run_dir.parent / "latest"
    if latest.exists() and not latest.is_symlink():
        return  # a real folder of that name is not ours to replace (run ids never say latest)
    tmp = run_dir.parent / f".latest-{os.getpid()}"
    try:
        if tmp.is_symlink() or tmp.exists():
            tmp.unlink()
        tmp.symlink_to(run_dir.name, target_is_directory=True)
        os.replace(tmp, latest)
    except OSError:  # a filesystem without symlinks: a plain file naming the run
        tmp.unlink(missing_ok=True)
        write_text_atomic(run_dir.parent / "LATEST", run_dir.name + "\n")


# From this many cases up, junit.xml and summary.md are written by a forked child while this
# process writes report.json and index.html: each of the two halves is ~0.2 ms a case
# (docs/benchmarks.md); below it, the fork (a few ms) is not worth it.
PARALLEL_MIN_CASES = 200


def write_run(
    report: RunReport, run_dir: Path, *, latest: bool = True, references: Path | None = None
) -> None:
    """Write every rendering of a run into its folder (``references``: the store whose frames
    ``index.html`` shows beside the outputs)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    with _beside(lambda: _write_text(report, run_dir), len(report.cases)):
        # one line (the C encoder): a run of 2,000 cases spent 2 s indenting it
        write_json_atomic(run_dir / "report.json", report.to_json(), indent=None)
        _write_html(report, run_dir, references)
    if latest:
        _point_latest(run_dir)


def render_run(report: RunReport, run_dir: Path, *, references: Path | None = None) -> None:
    """The renderings of a report (JUnit, Markdown, HTML), never the report itself. Each is
    built in memory before it replaces its file, so a rendering that fails leaves its old file
    (the HTML's images are written as its page is built) and the others are still written."""
    run_dir.mkdir(parents=True, exist_ok=True)
    with _beside(lambda: _write_text(report, run_dir), len(report.cases)):
        _write_html(report, run_dir, references)


def _write_text(report: RunReport, run_dir: Path) -> None:
    summary = summary_markdown(report)
    write_junit(report, run_dir / "junit.xml")
    write_text_atomic(run_dir / "summary.md", summary)


def _write_html(report: RunReport, run_dir: Path, references: Path | None) -> None:
    # imported here: Jinja2, numpy and the reference store stay out of `import harness.cli`
    # and of loading the pytest plugin
    from harness.report.html import render_run_html

    write_text_atomic(
        run_dir / "index.html", render_run_html(report, run_dir, references=references)
    )


@contextlib.contextmanager
def _beside(write: Callable[[], None], cases: int) -> Iterator[None]:
    """Run ``write`` in a forked child while the body runs here, for a report of at least
    :data:`PARALLEL_MIN_CASES` cases where that is safe (a fork, no other Python thread, two
    CPUs or more); else, or when the child did not succeed, run it here after the body, so
    that its error, if any, is raised here as it would have been without the child."""
    pid = _fork(write) if cases >= PARALLEL_MIN_CASES else None
    try:
        yield
    finally:
        if pid is None or not _succeeded(pid):
            write()


def _fork(write: Callable[[], None]) -> int | None:
    """The pid of a child that runs ``write`` and exits 0 (1 if it raised), or None where no
    child is started."""
    if not hasattr(os, "fork") or threading.active_count() > 1:
        return None
    cpus = (
        os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else range(os.cpu_count() or 1)
    )
    if len(cpus) < 2:
        return None
    try:
        pid = os.fork()
    except OSError:
        return None
    if pid:
        return pid
    code = 1
    try:  # the child: never returns into the caller (no atexit handlers, no buffered output)
        write()
        code = 0
    finally:
        os._exit(code)


def _succeeded(pid: int) -> bool:
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:  # reaped by someone else: its files cannot be trusted
        return False
    return os.waitstatus_to_exitcode(status) == 0


def read_report(path: Path) -> RunReport:
    """Load a report.json (or the run folder holding one), checking its format version."""
    doc = read_document(
        path,
        file_name="report.json",
        noun="report",
        version=SCHEMA_VERSION,
        redo="re-run the cases with this harness version",
        validate=validate_report,
    )
    try:
        return RunReport.from_json(doc)
    except (KeyError, TypeError, ValueError) as exc:
        raise ReportFormatError(f"{path}: malformed report: missing or bad {exc}") from exc
