"""pytest plugin: the case suite as pytest items, executed in batches through harness workers.

``pytest harness/`` (the harness package folder) collects the project's case suite (``cases/``
next to the rootdir, or ``--harness-cases``) as one item per case and platform, named like
``pipeline/t2va-int8[cpu]``. Items are not run one process each: the first item of a batch runs
the whole batch (every selected item of the same kind) through the same persistent workers that
``harness run`` uses, and each item then reports its own recorded result. With pytest-xdist the
plugin hands out whole batches, so cases stay batched inside each xdist worker.

Registered through the ``pytest11`` entry point and import-light: loading it imports neither
torch nor any other part of the harness until a case item is collected.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from harness.model.exits import INCOMPLETE
from harness.pytest_plugin import xdist_runs
from harness.pytest_plugin.compare import (
    COMPARE_KEY,
    SHARED_DIR_KEY,
    ComparisonItem,
    check_base_option,
    read_shared,
)
from harness.pytest_plugin.options import _opt_path, _root, add_options, check_platform_option
from harness.pytest_plugin.publish import GITHUB_LINES_KEY, publish_for_github
from harness.pytest_plugin.shard import (
    SHARD_KEY,
    check_shard_option,
    select_shard,
)

if TYPE_CHECKING:
    from harness.cases.plan import PlanItem
    from harness.execution.run import Runner
    from harness.model import CaseResult, RunReport

_PKG_DIR = Path(__file__).resolve().parent.parent  # the harness package folder
_STATE_KEY = pytest.StashKey["_BatchState"]()


class HarnessFlakyWarning(pytest.PytestWarning):
    """A case passed only after a retry: it is flaky, not passed."""


class HarnessCheckNotRunWarning(pytest.PytestWarning):
    """A check of a passing case could not run (say, no CLIP model): reported, never passed."""


class HarnessSimulatedWarning(pytest.PytestWarning):
    """A case ran on a simulated platform: its pass is not a pass on that platform."""


class HarnessContentionWarning(pytest.PytestWarning):
    """A latency budget was met only once run-queue delay (other processes' load) was taken
    out of wall time: labelled contention with its figures, not failed, not a silent pass."""


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def _is_harness_package(path: Path) -> bool:
    try:
        return path.resolve() == _PKG_DIR
    except OSError:
        return False


def pytest_collect_directory(path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if _is_harness_package(path):
        return CaseSuite.from_parent(parent, path=path)
    return None


def pytest_configure(config: pytest.Config) -> None:
    check_shard_option(config)
    check_platform_option(config)
    check_base_option(config)
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(xdist_runs.XdistBatches(), "harness-xdist-batches")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In an xdist worker, after ``-k`` and the like have deselected: the selected cases are
    the plan the workers' parts are merged against (:mod:`harness.pytest_plugin.xdist_runs`)."""
    selected = [it.plan_item for it in items if isinstance(it, CaseItem)]
    info = xdist_runs.session_plan(config, selected)
    if info is not None:
        config.stash[SHARD_KEY] = info


class CaseSuite(pytest.Directory):
    """The harness package folder, collected as the project's case suite."""

    def collect(self) -> Iterator[pytest.Item]:
        from harness.cases import build_plan, load_suite
        from harness.cases.plan import shuffle_plan
        from harness.platforms.profile import resolve_profile

        config = self.config
        cases_dir = _opt_path(config, "harness_cases", "cases")
        suite = load_suite([cases_dir])
        for err in suite.errors:
            yield CaseFileErrorItem.from_parent(
                self, name=f"casefile:{Path(err.path).name}", message=str(err)
            )
        profile = resolve_profile(config.getoption("harness_runner"), _root(config) / "runners")
        platforms = config.getoption("harness_platform") or [profile.platform]
        item_class: type[pytest.Item] = CaseItem
        if config.getoption("harness_base"):
            item_class = ComparisonItem
        plan = build_plan(suite.cases, platforms)
        seed = config.getoption("harness_shuffle")
        plan = plan if seed is None else shuffle_plan(plan, seed)
        for plan_item in select_shard(config, plan):
            yield item_class.from_parent(self, name=plan_item.name, plan_item=plan_item)


class CaseFailed(Exception):
    """Raised by a case item whose recorded result is not a pass."""

    def __init__(self, result: CaseResult) -> None:
        super().__init__(result.status)
        self.result = result


class CaseFileErrorItem(pytest.Item):
    """A case file that did not load: one failing item that names the file and the key."""

    def __init__(self, *, message: str, **kw: Any) -> None:
        super().__init__(**kw)
        self.message = message

    def runtest(self) -> None:
        raise CaseFailedMessage(self.message)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, CaseFailedMessage):
            return f"bad case file: {self.message}"
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, self.name


class CaseFailedMessage(Exception):
    pass


class CaseItem(pytest.Item):
    """One case on one platform; its result comes from a batch run through harness workers."""

    def __init__(self, *, plan_item: PlanItem, **kw: Any) -> None:
        super().__init__(**kw)
        self.plan_item = plan_item
        self.batch = plan_item.case.kind
        self.user_properties.append(("case_source", plan_item.case.source))

    def runtest(self) -> None:
        from harness.model import stage_medians

        state = _state(self.config)
        result = state.result_for(self)
        for key, value in (
            ("status", result.status),
            ("seed", result.seed),
            ("attempts", len(result.attempts)),
        ):
            self.user_properties.append((key, value))
        for stage, secs in stage_medians(result.attempts).items():
            self.user_properties.append((f"stage.{stage}", round(secs, 6)))
        self.user_properties.append(("simulated", "true" if result.simulated else "false"))
        if result.simulated and result.status in ("passed", "flaky"):
            if self.config.getoption("harness_real_only"):
                raise pytest.skip.Exception(
                    f"--harness-real-only: {result.reason or 'simulated platform'}",
                    _use_item_location=True,
                )
            state.simulated.append(self.name)
            warnings.warn(
                HarnessSimulatedWarning(
                    f"{self.name} passed on a SIMULATED platform: {result.reason}"
                ),
                stacklevel=1,
            )
        for check in result.checks:
            if check.contention:
                self.user_properties.append((f"contention.{check.name}", check.reason or ""))
                warnings.warn(
                    HarnessContentionWarning(f"{self.name}: {check.reason}"), stacklevel=1
                )
            if check.passed is None:
                warnings.warn(
                    HarnessCheckNotRunWarning(
                        f"{self.name}: check {check.name} not run: {check.reason}"
                    ),
                    stacklevel=1,
                )
        if result.status == "passed":
            return
        if result.status == "flaky":
            failed = [
                a for a in result.attempts if a.status in ("failed", "error", "timeout", "crashed")
            ]
            first = failed[0].error.message.splitlines()[0] if failed and failed[0].error else ""
            warnings.warn(
                HarnessFlakyWarning(
                    f"{self.name} is flaky: passed after {len(failed)} failed attempt(s); "
                    f"first failure: {first}"
                ),
                stacklevel=1,
            )
            state.flaky.append(self.name)
            return
        if result.status == "skipped":
            # Reported at the case file (reportinfo), not at this line of the plugin.
            raise pytest.skip.Exception(result.reason or "skipped", _use_item_location=True)
        raise CaseFailed(result)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, CaseFailed):
            from harness.report.text import explain_case

            return explain_case(excinfo.value.result)
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return Path(self.plan_item.case.source), 0, self.name


class _BatchState:
    """One Runner per pytest process; runs batches on demand and keeps their results."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.runner: Runner | None = None
        self.results: dict[str, CaseResult] = {}
        self.flaky: list[str] = []
        self.simulated: list[str] = []
        self.report: RunReport | None = None

    def _make_runner(self) -> Runner:
        from dataclasses import replace

        from harness.execution.run import Runner, RunOptions, new_run_id
        from harness.platforms.profile import resolve_profile

        config = self.config
        root = _root(config)
        worker_id = getattr(config, "workerinput", {}).get("workerid")
        run_id = new_run_id() + (f"-{worker_id}" if worker_id else "")
        roots = config.getoption("harness_code_root") or (
            [str(root / "targets" / "tinyav")] if (root / "targets" / "tinyav").is_dir() else []
        )
        refs = _opt_path(config, "harness_references", "references")
        shard = config.stash.get(SHARD_KEY, None)
        if shard is not None and worker_id:
            shard = replace(shard, part=worker_id)  # each xdist worker reports its part
        return Runner(
            RunOptions(
                profile=resolve_profile(config.getoption("harness_runner"), root / "runners"),
                out_root=_opt_path(config, "harness_out", "reports"),
                run_id=run_id,
                code_roots=tuple(str(Path(r).resolve()) for r in roots),
                references_root=str(refs) if refs.is_dir() else None,
                argv=("pytest", *config.invocation_params.args),
                cwd=str(root),
                write_latest=worker_id is None,
                fail_fast=bool(config.getoption("harness_fail_fast")),
                shard=shard,
            )
        )

    def result_for(self, item: CaseItem) -> CaseResult:
        if item.nodeid not in self.results:
            self._run_batch(item)
        return self.results[item.nodeid]

    def _run_batch(self, first: CaseItem) -> None:
        if self.runner is None:
            self.runner = self._make_runner()
        session_items = first.session.items
        start = session_items.index(first)
        batch = [
            it
            for it in session_items[start:]
            if isinstance(it, CaseItem)
            and it.batch == first.batch
            and it.nodeid not in self.results
        ]
        for it in batch:
            self.results[it.nodeid] = self.runner.run_item(it.plan_item)

    def finish(self) -> Path | None:
        if self.runner is None:
            return None
        from harness.report.io import write_run

        report = self.runner.finish()
        refs = self.runner.options.references_root
        write_run(
            report,
            self.runner.run_dir,
            latest=self.runner.options.write_latest,
            references=Path(refs) if refs else None,
        )
        self.report = report
        return self.runner.run_dir


def _state(config: pytest.Config) -> _BatchState:
    state = config.stash.get(_STATE_KEY, None)
    if state is None:
        state = _BatchState(config)
        config.stash[_STATE_KEY] = state
    return state


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    compare_state = config.stash.get(COMPARE_KEY, None)
    if SHARED_DIR_KEY in config.stash and not hasattr(config, "workerinput"):
        # the xdist controller: the comparison one worker made, for the session's verdict
        import shutil

        compare_state = read_shared(config) or compare_state
        shutil.rmtree(config.stash[SHARED_DIR_KEY], ignore_errors=True)
    if compare_state is not None and compare_state.out_dir is not None:
        config.stash[_RUN_DIR_KEY] = compare_state.out_dir
    if compare_state is not None:
        code = compare_state.incomplete()
        if code is not None and session.exitstatus in (0, 1):
            # an incomplete comparison is no answer, whatever its items said (DESIGN exit codes)
            session.exitstatus = code
    state = session.config.stash.get(_STATE_KEY, None)
    if state is not None:
        if exitstatus == pytest.ExitCode.INTERRUPTED and state.runner is not None:
            state.runner.interrupted = True
        run_dir = state.finish()
        if run_dir is not None:
            session.config.stash[_RUN_DIR_KEY] = run_dir
    own = None
    if state is not None and state.report is not None and state.runner is not None:
        lines = {
            it.plan_item.case.id: it.plan_item.case.line
            for it in session.items
            if isinstance(it, CaseItem)
        }
        own = (state.report, state.runner.run_dir, lines)
        workeroutput = getattr(config, "workeroutput", None)
        if workeroutput is not None:  # an xdist worker: the controller merges and publishes
            workeroutput["harness_run"] = (str(state.runner.run_dir), lines)
    merged = None
    if not hasattr(config, "workerinput") and compare_state is None:
        merged = xdist_runs.merge_session(config)
        if merged is not None:
            config.stash[_RUN_DIR_KEY] = merged[0]
        if xdist_runs.incomplete(config, session.testsfailed) and session.exitstatus in (0, 1):
            session.exitstatus = INCOMPLETE
    incomplete: list[str] = config.stash.get(xdist_runs.INCOMPLETE_KEY, [])
    publish_for_github(session.config, own, merged[1] if merged else None, incomplete)


_RUN_DIR_KEY = pytest.StashKey[Path]()


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    for line in config.stash.get(GITHUB_LINES_KEY, []):
        terminalreporter.write_line(line)  # workflow commands: GitHub reads them on stdout
    run_dir = config.stash.get(_RUN_DIR_KEY, None)
    state = config.stash.get(_STATE_KEY, None)
    incomplete = config.stash.get(xdist_runs.INCOMPLETE_KEY, [])
    if run_dir is None and not incomplete:
        return
    terminalreporter.write_sep("-", "harness")
    for why in incomplete:
        terminalreporter.write_line(f"harness: {why}", red=True)
    if run_dir is None:
        return
    if state is not None and state.flaky:
        terminalreporter.write_line(f"flaky (passed only on retry): {', '.join(state.flaky)}")
    if state is not None and state.simulated:
        terminalreporter.write_line(
            f"SIMULATED (passed on a platform this machine does not have, not a real pass): "
            f"{', '.join(state.simulated)}"
        )
    compare_state = config.stash.get(COMPARE_KEY, None)
    if compare_state is not None and compare_state.error is not None:
        terminalreporter.write_line(f"harness comparison not made: {compare_state.error}")
    if compare_state is not None and compare_state.comparison is not None:
        counts = {k: v for k, v in compare_state.comparison.counts().items() if v}
        terminalreporter.write_line(
            "harness comparison: " + ", ".join(f"{v} {k}" for k, v in counts.items())
        )
        code = compare_state.incomplete()
        if code is not None:
            faults = "; ".join(compare_state.comparison.infra_errors) or "see comparison.json"
            terminalreporter.write_line(
                f"harness comparison INCOMPLETE (exit {code}): {faults}", red=True
            )
        terminalreporter.write_line(f"comparison: {run_dir / 'comparison.json'}")
        # the explain page (harness explain) that the comparison wrote, appended as it is
        explain = run_dir / "explain.md"
        if explain.is_file():
            for line in explain.read_text(encoding="utf-8").splitlines():
                terminalreporter.write_line(line)
        return
    terminalreporter.write_line(f"harness report: {run_dir / 'report.json'}")
