"""``pytest harness/ --harness-base REV``: the comparison of base and head as pytest items.

One item per case and platform, as without ``--harness-base``; the first item runs the whole
comparison (every selected item, both revisions interleaved on this runner, through
:func:`harness.compare.run.compare_revisions`), and each item's outcome is its case's verdict:
a regression, a new failure or a not-comparable case fails the item; inconclusive, suspect,
flaky and missing pass with a :class:`HarnessComparisonWarning` (and fail under
``--harness-strict``); everything else passes. CI keeps ``pytest harness/`` as its entry.

The comparison runs once per session. Under pytest-xdist the controller hands every worker one
shared folder; the first worker to take its lock runs the comparison and writes where it is,
the others wait on the lock and read it (two comparisons at once on one runner would each
measure the other's load). A comparison that is incomplete (its exit code 2, 3 or 5:
infrastructure errors, an interrupted run, a side or case missing, load errors) fails the
session with that exit code, whatever the items said.
"""

from __future__ import annotations

import json
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from harness.pytest_plugin.options import _opt_path, _root

if TYPE_CHECKING:
    from harness.cases import PlanItem
    from harness.model import CaseComparison, Comparison


class HarnessComparisonWarning(pytest.PytestWarning):
    """A case whose comparison was inconclusive, suspect, flaky or missing: not a pass."""


class ComparisonError(Exception):
    """The comparison itself could not be made (not a verdict about the case)."""


class ComparisonFailed(Exception):
    def __init__(self, case: CaseComparison) -> None:
        super().__init__(case.verdict)
        self.case = case


@dataclass
class _CompareState:
    comparison: Comparison | None = None
    out_dir: Path | None = None
    error: str | None = None
    error_code: int = 3  # the exit code of the HarnessError in ``error``

    def incomplete(self) -> int | None:
        """The session's exit code when the comparison is not a complete answer, else None."""
        if self.error is not None:
            return self.error_code
        if self.comparison is None:
            return None
        code = self.comparison.exit_code()
        return code if code in (2, 3, 5) else None


COMPARE_KEY = pytest.StashKey[_CompareState]()
SHARED_DIR_KEY = pytest.StashKey[Path]()
# workerinput key: the folder the xdist workers of one session share the comparison through
SHARED_INPUT = "harness_compare_dir"
_RESULT = "result.json"


def shared_dir(config: pytest.Config) -> Path | None:
    """The folder this session's processes share the comparison through (None: one process)."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        value = workerinput.get(SHARED_INPUT)
        return Path(value) if value else None
    return config.stash.get(SHARED_DIR_KEY, None)


def controller_shared_dir(config: pytest.Config) -> Path:
    """The controller's shared folder (made on first use), handed to each xdist worker."""
    import tempfile

    d = config.stash.get(SHARED_DIR_KEY, None)
    if d is None:
        d = Path(tempfile.mkdtemp(prefix="harness-compare-"))
        config.stash[SHARED_DIR_KEY] = d
    return d


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock on ``path``, released when the holder exits or dies."""
    import fcntl

    with path.open("a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def load_shared(state: _CompareState, doc: dict[str, Any]) -> None:
    """Fill ``state`` from the shared result another process wrote."""
    from harness.report.comparison_io import read_comparison

    state.error = doc.get("error")
    state.error_code = int(doc.get("error_code", 3))
    if doc.get("out_dir"):
        state.out_dir = Path(doc["out_dir"])
        state.comparison = read_comparison(state.out_dir / "comparison.json")


def read_shared(config: pytest.Config) -> _CompareState | None:
    """The comparison a worker wrote to the shared folder (the controller's view), or None."""
    d = config.stash.get(SHARED_DIR_KEY, None)
    if d is None or not (d / _RESULT).is_file():
        return None
    state = _state(config)
    load_shared(state, json.loads((d / _RESULT).read_text()))
    return state


def _obtain(first: ComparisonItem) -> _CompareState:
    """The session's comparison: run here, or, under xdist, by whichever worker took the
    shared lock first (the others wait for it and read its result)."""
    from harness.fsio import write_json_atomic

    state = _state(first.config)
    shared = shared_dir(first.config)
    if shared is None:
        return _run(first)
    with _locked(shared / "lock"):
        result, claim = shared / _RESULT, shared / "claimed"
        if result.is_file():
            load_shared(state, json.loads(result.read_text()))
            return state
        if claim.is_file():
            state.error = (
                f"the process that ran the comparison ({claim.read_text().strip()}) stopped "
                "before writing its result"
            )
            return state
        worker = getattr(first.config, "workerinput", {}).get("workerid", "?")
        claim.write_text(worker)
        try:
            _run(first)
        finally:
            write_json_atomic(
                result,
                {
                    "worker": worker,
                    "out_dir": str(state.out_dir) if state.out_dir else None,
                    "error": state.error if state.out_dir or state.error else "no result",
                    "error_code": state.error_code,
                },
            )
    return state


def _state(config: pytest.Config) -> _CompareState:
    state = config.stash.get(COMPARE_KEY, None)
    if state is None:
        state = _CompareState()
        config.stash[COMPARE_KEY] = state
    return state


def _run(first: ComparisonItem) -> _CompareState:
    from harness.compare.latency import LatencySettings
    from harness.compare.run import CompareRequest, compare_revisions
    from harness.compare.sequential import looks_up_to
    from harness.errors import HarnessError
    from harness.platforms.profile import resolve_profile

    config = first.config
    state = _state(config)
    root = _root(config)
    items = [it for it in first.session.items if isinstance(it, ComparisonItem)]
    profile = resolve_profile(config.getoption("harness_runner"), root / "runners")
    request = CompareRequest(
        repo=root,
        case_paths=(_opt_path(config, "harness_cases", "cases"),),
        case_ids=tuple(it.plan_item.case.id for it in items),
        platforms=tuple(sorted({it.plan_item.platform for it in items})),
        code_roots=tuple(
            config.getoption("harness_code_root")
            or (["targets/tinyav"] if (root / "targets" / "tinyav").is_dir() else [])
        ),
        out_root=_opt_path(config, "harness_out", "reports"),
        profile=profile,
        references_root=_opt_path(config, "harness_references", "references"),
        latency=LatencySettings(
            delta=profile.compare_delta or 0.05,
            looks=looks_up_to(config.getoption("harness_rounds")),
        ),
        quality_margins=dict(profile.compare_margins),
        worker_per_round=not config.getoption("harness_reuse_workers"),
        noise_dir=root / "runners" / "noise",
        argv=("pytest", *config.invocation_params.args),
        progress=lambda line: print(line, file=sys.stderr),
    )
    base = str(config.getoption("harness_base"))
    head = str(config.getoption("harness_head"))
    try:
        state.comparison = compare_revisions(base, head, request=request)
        state.out_dir = request.out_root / state.comparison.id
    except HarnessError as exc:
        state.error = f"harness compare {base}..{head}: {exc}"
        state.error_code = exc.exit_code
    return state


def check_base_option(config: pytest.Config) -> None:
    """--harness-base and --harness-head must name commits of the rootdir's repository, and
    --harness-rounds a number of rounds a comparison can run: a usage error before
    collection, not a failure of every item."""
    rounds = config.getoption("harness_rounds")
    if rounds is not None:
        from harness.compare.sequential import looks_up_to

        try:
            looks_up_to(rounds)
        except ValueError as exc:
            raise pytest.UsageError(f"--harness-rounds {rounds}: {exc}") from None
    base = config.getoption("harness_base")
    if not base:
        return
    from harness.compare.worktree import resolve
    from harness.errors import UsageError

    for flag, rev in (
        ("--harness-base", base),
        ("--harness-head", config.getoption("harness_head")),
    ):
        try:
            resolve(_root(config), str(rev))
        except UsageError as exc:
            raise pytest.UsageError(f"{flag} {rev}: {exc}") from None


class ComparisonItem(pytest.Item):
    """One case on one platform, judged base vs head."""

    def __init__(self, *, plan_item: PlanItem, **kw: Any) -> None:
        super().__init__(**kw)
        self.plan_item = plan_item
        self.user_properties.append(("case_source", plan_item.case.source))

    def _verdict(self) -> CaseComparison:
        state = _state(self.config)
        if state.comparison is None and state.error is None:
            _obtain(self)
        if state.error is not None:
            raise ComparisonError(state.error)
        assert state.comparison is not None
        for case in state.comparison.cases:
            if case.name == self.name:
                return case
        raise ComparisonFailed(_missing(self.name, state.comparison))

    def runtest(self) -> None:
        case = self._verdict()
        for key, value in (
            ("verdict", case.verdict),
            ("latency_verdict", case.latency_verdict),
            ("quality_verdict", case.quality_verdict),
            ("divergence", f"{case.divergence.kind}:{case.divergence.first or ''}"),
            ("rounds", case.rounds),
        ):
            self.user_properties.append((key, value))
        from harness.model.comparison import BLOCKING, INCOMPLETE, STRICT_BLOCKING

        if case.verdict in BLOCKING | INCOMPLETE:
            raise ComparisonFailed(case)
        if case.verdict == "skipped":
            raise pytest.skip.Exception(case.reason or "skipped on both sides")
        if case.verdict in STRICT_BLOCKING:
            if self.config.getoption("harness_strict"):
                raise ComparisonFailed(case)
            warnings.warn(
                HarnessComparisonWarning(
                    f"{self.name}: {case.verdict}" + (f" - {case.reason}" if case.reason else "")
                ),
                stacklevel=1,
            )

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, ComparisonFailed):
            from harness.report.comparison_md import explain_case_comparison

            return explain_case_comparison(excinfo.value.case)
        if isinstance(excinfo.value, ComparisonError):
            return f"harness comparison not made: {excinfo.value}"
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return Path(self.plan_item.case.source), 0, self.name


def _missing(name: str, comparison: Comparison) -> CaseComparison:
    """A case the comparison has no verdict for is ``missing``, never a pass."""
    from harness.model import CaseComparison
    from harness.model.comparison import Divergence, FailureMatrix

    kind, _, rest = name.partition("/")
    case_id, _, platform = rest.rstrip("]").partition("[")
    return CaseComparison(
        id=case_id,
        kind=kind,
        platform=platform,
        verdict="missing",
        latency_verdict="missing",
        quality_verdict="missing",
        failures=FailureMatrix("missing"),
        divergence=Divergence("missing", None, {}),
        reason=f"comparison {comparison.id} has no verdict for this case",
    )
