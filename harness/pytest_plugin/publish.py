"""GitHub Actions for ``pytest harness/``: the job summary and the ``::error`` annotations.

Without xdist the session's own run is published. An xdist worker hands its run folder (and
its case id -> line map) to the controller through ``workeroutput``; the controller publishes
the run it merged them into (:mod:`harness.pytest_plugin.xdist_runs`), or, where there is none
(``--harness-shard``, a merge that failed), every worker's run: one summary each appended to
``GITHUB_STEP_SUMMARY``, and the annotations of all of them capped together. The commands are
printed by the terminal summary, on stdout, where GitHub reads them.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from harness.pytest_plugin.compare import COMPARE_KEY

if TYPE_CHECKING:
    from harness.model import RunReport

# (run folder, case id -> line) of each xdist worker's run, collected by the controller.
WORKER_RUNS_KEY = pytest.StashKey[list[tuple[str, dict[str, int]]]]()
# What the terminal summary prints: annotation commands and warnings.
GITHUB_LINES_KEY = pytest.StashKey[list[str]]()


def publish_for_github(
    config: pytest.Config,
    own: tuple[RunReport, Path, dict[str, int]] | None,
    merged: RunReport | None = None,
    incomplete: Sequence[str] = (),
) -> None:
    """Append summary.md to ``GITHUB_STEP_SUMMARY`` and collect the annotation commands of
    ``own`` (this session's run: report, folder, lines) and of the xdist workers' runs, or of
    ``merged``, the run the controller merged those into; each reason the session is
    ``incomplete`` (exit 3) is an error annotation of its own."""
    env = os.environ
    if not env.get("GITHUB_STEP_SUMMARY") and env.get("GITHUB_ACTIONS") != "true":
        return
    runs: list[tuple[RunReport, dict[str, int] | None]] = []
    if own is not None:
        if getattr(config, "workeroutput", None) is not None:
            return  # an xdist worker, whose run went to the controller: the controller publishes
        report, _, lines = own
        runs.append((report, lines))
    compare_state = config.stash.get(COMPARE_KEY, None)
    if not runs and not config.stash.get(WORKER_RUNS_KEY, []) and compare_state is None:
        return  # not a session of `pytest harness/`

    from harness.errors import ReportFormatError
    from harness.report import github
    from harness.report.io import read_report

    out = config.stash.setdefault(GITHUB_LINES_KEY, [])
    workers = config.stash.get(WORKER_RUNS_KEY, [])
    if merged is not None:
        lines_of = {case: line for _, lines in workers for case, line in lines.items()}
        runs.append((merged, lines_of))
        workers = []
    for run_dir_text, lines in workers:
        try:
            runs.append((read_report(Path(run_dir_text)), lines))
        except ReportFormatError as exc:
            out.append(f"warning: GitHub summary of an xdist worker's run: {exc}")
    for report, _ in runs:
        warning = github.append_run_summary(report, env)
        out += [f"warning: {warning}"] if warning else []
    out += github.run_commands(runs, env)
    title = github.escape_property("harness: the run is incomplete (exit 3)")
    out += [f"::error title={title}::{github.escape_data(why)}" for why in incomplete]
    if compare_state is not None and compare_state.comparison is not None:
        warning = github.append_comparison_summary(compare_state.comparison, env)
        out += [f"warning: {warning}"] if warning else []
        if compare_state.out_dir is not None:
            out += github.comparison_commands(compare_state.comparison, compare_state.out_dir, env)
