"""One run folder for ``pytest harness/ -n K``: each xdist worker runs the batches it is handed
and writes them as a part of its own (``<run id>-gw0``...); the controller merges the parts
into one run folder, with ``latest`` pointing at it, as ``harness merge`` joins the parts of a
shard.

Each worker records the session's selected cases (after ``-k``) as the plan of a single shard
(1/1), with the xdist session's id as its nonce, so the merge can tell which planned case no
worker reported (a worker that crashed) instead of leaving it out. With ``--harness-shard`` the
parts stay apart for ``harness merge`` to join across machines; a comparison
(``--harness-base``) has its own folder.

Import-light like the rest of the plugin: the harness modules load only when there are cases.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from harness.pytest_plugin.options import _opt_path
from harness.pytest_plugin.publish import WORKER_RUNS_KEY

if TYPE_CHECKING:
    from harness.cases.plan import PlanItem
    from harness.model import ShardInfo

SOURCE = "pytest-xdist: the workers' parts of one session"
# Why the controller could not merge the workers' runs, for the terminal summary.
MERGE_ERROR_KEY = pytest.StashKey[str]()


def session_plan(config: pytest.Config, selected: Sequence[PlanItem]) -> ShardInfo | None:
    """In an xdist worker of a plain session (no ``--harness-shard``, no comparison): the
    selected cases as one shard's plan, identical in every worker (each collects the same
    items); None elsewhere."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None or not selected:
        return None
    if config.getoption("harness_shard") or config.getoption("harness_base"):
        return None
    from harness.cases.shard import split

    return split(selected, 1, nonce=f"xdist:{workerinput['testrunuid']}").info(1, SOURCE)


def merge_parts(parts: Sequence[str], out_root: Path, references: Path | None) -> Path:
    """Merge the workers' run folders ``parts`` into a new run folder under ``out_root`` (its
    outputs copied beside, ``latest`` pointed at it); returns it. Raises
    :class:`harness.errors.HarnessError` (the parts stay as they are) when they do not merge."""
    from harness.execution.run import new_run_id
    from harness.report.merge import write_merged
    from harness.report.shard_io import read_shard_reports

    folders = [Path(p) for p in parts]
    reports = read_shard_reports(folders)
    run_id = new_run_id()
    write_merged(
        list(zip(folders, reports, strict=True)),
        out_root / run_id,
        run_id=run_id,
        argv=reports[0].argv,
        latest=True,
        references=references,
    )
    return out_root / run_id


def merge_session(config: pytest.Config) -> Path | None:
    """In the xdist controller of a plain session: the workers' runs (handed over through
    ``workeroutput``) merged into one run folder, returned. A merge that fails leaves the parts
    and says why (:data:`MERGE_ERROR_KEY`); it never changes an item's outcome, and the plugin
    makes the session's exit status 3 (the run is incomplete) where it would read 0 or 1."""
    runs = config.stash.get(WORKER_RUNS_KEY, [])
    if not runs or config.getoption("harness_shard") or config.getoption("harness_base"):
        return None
    from harness.errors import HarnessError

    refs = _opt_path(config, "harness_references", "references")
    try:
        return merge_parts(
            [run for run, _ in runs],
            _opt_path(config, "harness_out", "reports"),
            refs if refs.is_dir() else None,
        )
    except (HarnessError, OSError) as exc:
        parts = ", ".join(run for run, _ in runs)
        config.stash[MERGE_ERROR_KEY] = (
            f"the xdist workers' runs were not merged ({parts}); the parts are kept, the run "
            f"is incomplete (exit 3): {exc}"
        )
        return None
