"""One run folder for ``pytest harness/ -n K``: each xdist worker runs the batches it is handed
and writes them as a part of its own (``<run id>-gw0``...); the controller merges the parts
into one run folder, with ``latest`` pointing at it, as ``harness merge`` joins the parts of a
shard.

Each worker records the session's selected cases (after ``-k``) as the plan of a single shard
(1/1), with the xdist session's id as its nonce, so the merge can tell which planned case no
worker reported (a worker that crashed) instead of leaving it out. With ``--harness-shard`` the
parts stay apart for ``harness merge`` to join across machines; a comparison
(``--harness-base``) has its own folder.

The session is incomplete (DESIGN's exit 3, a harness or infrastructure fault, never 1) when
the parts do not merge, when the merged run misses a selected case, or when every item pytest
counts failed is one an xdist worker died in: the cases run in workers of their own, so an
xdist worker that dies is the harness's process, not a case's.

Import-light like the rest of the plugin: the harness modules load only when there are cases.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from harness.model.shard import INCOMPLETE_CAUSES
from harness.model.vocab import KINDS
from harness.pytest_plugin.compare import SHARED_INPUT, controller_shared_dir
from harness.pytest_plugin.options import _opt_path
from harness.pytest_plugin.publish import WORKER_RUNS_KEY

if TYPE_CHECKING:
    from harness.cases.plan import PlanItem
    from harness.model import RunReport, ShardInfo

SOURCE = "pytest-xdist: the workers' parts of one session"
# Why the session's run is incomplete (exit 3), for the terminal summary: the workers' parts
# did not merge, a selected case no worker reported, an xdist worker that crashed.
INCOMPLETE_KEY = pytest.StashKey[list[str]]()
# "gw0 crashed while running ::loader/load-bf16-exact[cpu]", per xdist worker that crashed.
CRASHES_KEY = pytest.StashKey[list[str]]()


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


def merge_parts(
    parts: Sequence[str], out_root: Path, references: Path | None
) -> tuple[Path, RunReport]:
    """Merge the workers' run folders ``parts`` into a new run folder under ``out_root`` (its
    outputs copied beside, ``latest`` pointed at it); returns it and its report. Raises
    :class:`harness.errors.HarnessError` (the parts stay as they are) when they do not merge."""
    from harness.execution.run import new_run_id
    from harness.report.merge import write_merged
    from harness.report.shard_io import read_shard_reports

    folders = [Path(p) for p in parts]
    reports = read_shard_reports(folders)
    run_id = new_run_id()
    merged, _ = write_merged(
        list(zip(folders, reports, strict=True)),
        out_root / run_id,
        run_id=run_id,
        argv=reports[0].argv,
        latest=True,
        references=references,
    )
    return out_root / run_id, merged


def merge_session(config: pytest.Config) -> tuple[Path, RunReport] | None:
    """In the xdist controller of a plain session: the workers' runs (handed over through
    ``workeroutput``) merged into one run folder, returned with its report. A merge that
    fails leaves the parts and says why, and a merged run that misses a selected case says
    which (both in :data:`INCOMPLETE_KEY`); neither changes an item's outcome (see
    :func:`incomplete`)."""
    runs = config.stash.get(WORKER_RUNS_KEY, [])
    if not runs or config.getoption("harness_shard") or config.getoption("harness_base"):
        return None
    from harness.errors import HarnessError

    refs = _opt_path(config, "harness_references", "references")
    try:
        out, report = merge_parts(
            [run for run, _ in runs],
            _opt_path(config, "harness_out", "reports"),
            refs if refs.is_dir() else None,
        )
    except (HarnessError, OSError) as exc:
        parts = ", ".join(run for run, _ in runs)
        _incomplete(
            config,
            f"the xdist workers' runs were not merged ({parts}); the parts are kept, the run "
            f"is incomplete (exit 3): {exc}",
        )
        return None
    unreported = [m.name for m in report.missing if m.cause in INCOMPLETE_CAUSES]
    if unreported:
        names = ", ".join(unreported)
        _incomplete(config, f"no xdist worker reported {names}: the run is incomplete (exit 3)")
    return out, report


def case_kind(nodeid: str) -> str | None:
    """The kind of the case item ``nodeid`` names (``<kind>/<id>[<platform>]``); None for any
    other item (a session's own tests, where the plugin is installed, are never case items)."""
    _, sep, name = nodeid.rpartition("::")
    kind = name.split("/", 1)[0]
    return kind if sep and "/" in name and name.endswith("]") and kind in KINDS else None


def note_crash(config: pytest.Config, worker: str, nodeid: str) -> None:
    """An xdist worker died while running ``nodeid`` (pytest counts it a failed item); only a
    case item's death is the harness's: a test of the session's own may have killed it."""
    if case_kind(nodeid) is not None:
        crash = f"{worker} crashed while running {nodeid}"
        config.stash.setdefault(CRASHES_KEY, []).append(crash)


def incomplete(config: pytest.Config, failed: int) -> bool:
    """Whether the controller's session is incomplete, DESIGN's exit 3 (a harness or
    infrastructure fault, never 1): its parts did not merge or missed a case, or every item
    pytest counts failed was one an xdist worker crashed in. The cases run in workers of
    their own, so an xdist worker that dies is the harness's process, not a case's; a case
    that failed on its code besides makes the session 1, as a run's code failure wins over
    infrastructure."""
    crashes = config.stash.get(CRASHES_KEY, [])
    if crashes and failed == len(crashes):
        _incomplete(
            config,
            f"xdist worker {'; '.join(crashes)}: a fault of the harness's process, not of a "
            "case (cases run in workers of their own); the run is incomplete (exit 3)",
        )
    return bool(config.stash.get(INCOMPLETE_KEY, []))


def _incomplete(config: pytest.Config, why: str) -> None:
    config.stash.setdefault(INCOMPLETE_KEY, []).append(why)


class XdistBatches:
    """The controller's xdist hooks: hands whole batches (all cases of one kind) to one xdist
    worker, collects each worker's run folder for the merge (:func:`merge_session`) and notes
    the workers that crashed (:func:`incomplete`)."""

    def pytest_configure_node(self, node: Any) -> None:
        # --harness-base: the workers share one comparison through a folder of this session
        if node.config.getoption("harness_base"):
            node.workerinput[SHARED_INPUT] = str(controller_shared_dir(node.config))

    def pytest_handlecrashitem(self, crashitem: str, report: Any, sched: Any) -> None:
        note_crash(report.node.config, report.node.gateway.id, crashitem)

    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        run = getattr(node, "workeroutput", {}).get("harness_run")
        if run is not None:
            node.config.stash.setdefault(WORKER_RUNS_KEY, []).append((run[0], dict(run[1])))

    @pytest.hookimpl(tryfirst=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        if config.getoption("dist") not in ("load", "no"):
            return None  # the user chose a distribution mode: respect it
        if not _collects_cases(config):
            return None  # a session of other tests, where the plugin is only installed
        from xdist.scheduler import LoadScopeScheduling

        class CaseBatchScheduling(LoadScopeScheduling):
            def _split_scope(self, nodeid: str) -> str:
                kind = case_kind(nodeid)  # one batch per kind of case
                if kind is not None:
                    return f"{nodeid.rpartition('::')[0]}::{kind}"
                return super()._split_scope(nodeid)

        return CaseBatchScheduling(config, log)


def _collects_cases(config: pytest.Config) -> bool:
    """Whether the session's arguments reach the harness package, which the plugin collects as
    the case suite (``pytest harness/``, or a folder above it)."""
    package = Path(__file__).resolve().parents[1]
    for arg in config.args:
        try:
            path = (config.invocation_params.dir / arg.split("::")[0]).resolve()
        except OSError:
            continue
        if path == package or path in package.parents:
            return True
    return False
