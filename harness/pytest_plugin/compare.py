"""``pytest harness/ --harness-base REV``: the comparison of base and head as pytest items.

One item per case and platform, as without ``--harness-base``; the first item runs the whole
comparison (every selected item, both revisions interleaved on this runner, through
:func:`harness.compare.run.compare_revisions`), and each item's outcome is its case's verdict:
a regression, a new failure or a not-comparable case fails the item; inconclusive, suspect,
flaky and missing pass with a :class:`HarnessComparisonWarning` (and fail under
``--harness-strict``); everything else passes. CI keeps ``pytest harness/`` as its entry.
"""

from __future__ import annotations

import sys
import warnings
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


class ComparisonFailed(Exception):
    def __init__(self, case: CaseComparison) -> None:
        super().__init__(case.verdict)
        self.case = case


@dataclass
class _CompareState:
    comparison: Comparison | None = None
    out_dir: Path | None = None
    error: str | None = None


COMPARE_KEY = pytest.StashKey[_CompareState]()


def _state(config: pytest.Config) -> _CompareState:
    state = config.stash.get(COMPARE_KEY, None)
    if state is None:
        state = _CompareState()
        config.stash[COMPARE_KEY] = state
    return state


def _run(first: ComparisonItem) -> _CompareState:
    from harness.compare.latency import LatencySettings
    from harness.compare.run import CompareRequest, compare_revisions
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
        code_roots=tuple(config.getoption("harness_code_root") or ["targets/tinyav"]),
        out_root=_opt_path(config, "harness_out", "reports"),
        profile=profile,
        references_root=_opt_path(config, "harness_references", "references"),
        latency=LatencySettings(delta=profile.compare_delta or 0.05),
        quality_margins=dict(profile.compare_margins),
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
    return state


def check_base_option(config: pytest.Config) -> None:
    """--harness-base and --harness-head must name commits of the rootdir's repository: a
    usage error before collection, not a failure of every item."""
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
            _run(self)
        if state.error is not None:
            raise pytest.UsageError(state.error)
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
        from harness.model.comparison import BLOCKING, STRICT_BLOCKING

        if case.verdict in BLOCKING:
            raise ComparisonFailed(case)
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
