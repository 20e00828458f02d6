"""Which attempts count for failures (DESIGN "Which attempts count"), on hand-built attempts:
a failure in a warm-up or in a try a retry replaced is still a failure of that side; a
skipped or budget-declined side never counts as passed; a head-only failure is a
``new_failure`` with its rate unless the case file declares the case known-flaky; and one
exit-code policy turns the verdicts into 2, 3, 5, 1, 7 or 0."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from harness.compare.failures import failure_matrix, settled_by_failures
from harness.model import (
    Attempt,
    CaseComparison,
    CaseResult,
    Comparison,
    Divergence,
    ErrorInfo,
    FailureMatrix,
    LoadError,
    SideInfo,
    exit_code,
    finals,
    passing_finals,
    ran,
    runs,
)
from harness.model.records import RunReport


def att(
    status: str = "passed",
    *,
    rnd: int = 0,
    retry: int = 0,
    warmup: bool = False,
    error: str | None = None,
    side: str = "head",
) -> Attempt:
    return Attempt(
        "c",
        "cpu",
        rnd * 10 + retry,
        status,  # type: ignore[arg-type]
        1,
        warmup=warmup,
        retry=retry,
        round=rnd,
        side=side,  # type: ignore[arg-type]
        duration_s=0.1,
        error=ErrorInfo.make(error, f"{error} happened") if error else None,
    )


def result(*attempts: Attempt, status: str = "passed", reason: str | None = None) -> CaseResult:
    return CaseResult("c", "pipeline", "cpu", status, attempts=attempts, reason=reason)  # type: ignore[arg-type]


def clean(n: int = 3) -> CaseResult:
    return result(att(warmup=True), *(att(rnd=r) for r in range(n)))


def test_counting_final_replaces_retried_try_but_ran_keeps_it() -> None:
    atts = [att("timeout", rnd=0, error="Timeout"), att(rnd=0, retry=1), att(rnd=1)]
    assert [a.status for a in finals(atts)] == ["passed", "passed"]
    assert len(passing_finals(atts)) == 2
    assert [a.status for a in ran(atts)] == ["timeout", "passed", "passed"]
    assert runs(atts)[0].retried and not runs(atts)[1].retried


def test_retry_hidden_hang_on_head_is_a_new_failure() -> None:
    """Head times out on every first try and passes on the retry: its finals all pass, but
    the hang is head-only, so the case is not ``no_change`` (it was, before)."""
    head = result(
        att(warmup=True),
        *(
            a
            for r in range(3)
            for a in (att("timeout", rnd=r, error="Timeout"), att(rnd=r, retry=1))
        ),
        status="flaky",
    )
    fm = failure_matrix(clean(), head)
    assert fm.verdict == "new_failure", fm
    assert fm.head_retried == 3 and fm.head_passed == 3
    assert "3 of 4 head runs, 0 of 4 base" in (fm.reason or "")


def test_warmup_crash_on_head_is_a_new_failure() -> None:
    head = result(att("crashed", warmup=True, error="WorkerCrash"), *(att(rnd=r) for r in range(3)))
    fm = failure_matrix(clean(), head)
    assert fm.verdict == "new_failure", fm
    assert fm.head_only and "warm-up" in (fm.reason or "")


def test_skipped_side_is_missing_never_passed() -> None:
    head = result(
        *(att("skipped", rnd=r, error="Skipped") for r in range(3)),
        status="skipped",
        reason="requires module 'missingmod'",
    )
    fm = failure_matrix(clean(), head)
    assert fm.verdict == "missing"
    assert "head: skipped: requires module 'missingmod'" in (fm.reason or "")


def test_a_side_the_harness_broke_is_missing_never_a_failure_of_the_code() -> None:
    """A harness fault ran none of the code under test: on every run, the case is missing
    (the comparison is incomplete, exit 3); on one run, it is judged on the runs that ran."""
    every = result(*(att("error", rnd=r, error="HarnessInternalError") for r in range(3)))
    fm = failure_matrix(clean(), every, known_flaky=None)
    assert fm.verdict == "missing", fm
    assert "head: the harness failed on every run (HarnessInternalError happened)" in (
        fm.reason or ""
    )
    assert settled_by_failures(fm, 3, 20)  # no more rounds can fix a harness bug
    once = result(att("error", rnd=0, error="HarnessInternalError"), att(rnd=1), att(rnd=2))
    fm = failure_matrix(clean(), once)
    assert fm.verdict == "no_change" and fm.head_signatures == () and fm.head_passed == 2


def test_both_sides_skipped_alike_is_skipped() -> None:
    def skipped() -> CaseResult:
        return result(status="skipped", reason="platform hip is not available")

    fm = failure_matrix(skipped(), skipped())
    assert fm.verdict == "skipped"


def test_budget_declined_side_is_missing() -> None:
    head = result(att("budget_declined", rnd=0), status="budget_declined")
    assert failure_matrix(clean(), head).verdict == "missing"


def test_known_flaky_downgrades_an_intermittent_head_only_failure_and_says_so() -> None:
    head = result(
        att(warmup=True), att(rnd=0), att("failed", rnd=1, error="ValueError"), att(rnd=2)
    )
    fm = failure_matrix(clean(), head, known_flaky="issue #123: racy decode")
    assert fm.verdict == "flaky"
    assert fm.known_flaky == "issue #123: racy decode"
    assert "known flaky (issue #123: racy decode)" in (fm.reason or "")
    # ... but not a head that fails every run
    every = result(*(att("failed", rnd=r, error="ValueError") for r in range(3)), status="failed")
    assert failure_matrix(clean(), every, known_flaky="x").verdict == "new_failure"


def test_intermittent_head_only_failure_keeps_buying_rounds() -> None:
    head = result(att(rnd=0), att("failed", rnd=1, error="ValueError"), att(rnd=2))
    fm = failure_matrix(clean(), head)
    assert not settled_by_failures(fm, rounds=3, max_rounds=7)
    assert settled_by_failures(fm, rounds=7, max_rounds=7)
    deterministic = failure_matrix(
        clean(), result(*(att("failed", rnd=r, error="E") for r in range(3)))
    )
    assert not settled_by_failures(deterministic, rounds=3, max_rounds=7)  # head-only: a rate
    pre = failure_matrix(
        result(*(att("failed", rnd=r, error="E", side="base") for r in range(3))),
        result(*(att("failed", rnd=r, error="E") for r in range(3))),
    )
    assert pre.verdict == "pre_existing_failure"
    assert settled_by_failures(pre, rounds=3, max_rounds=7)


def _comparison(*verdicts: str, **kw: object) -> Comparison:
    side = SideInfo("r", "run", "digest")
    cases = tuple(
        CaseComparison(
            id=f"c{i}",
            kind="pipeline",
            platform="cpu",
            verdict=v,
            latency_verdict="no_change",
            quality_verdict="no_change",
            failures=FailureMatrix(v),
            divergence=Divergence("none"),
        )
        for i, v in enumerate(verdicts)
    )
    return replace(Comparison("id", side, side, True, cases), **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("verdicts", "extra", "code"),
    [
        (("no_change", "pre_existing_failure", "fixed"), {}, 0),
        (("no_change", "regression"), {}, 1),
        (("no_change", "new_failure"), {}, 1),
        (("no_change", "missing"), {}, 3),
        (("no_change", "not_comparable"), {}, 3),
        (("regression", "missing"), {}, 3),
        (("no_change",), {"infra_errors": ("head: run r was interrupted",)}, 3),
        (("no_change",), {"load_errors": ("head: cases/x.toml: bad",)}, 2),
        (("regression",), {"load_errors": ("cases/x.toml: bad",)}, 2),
        ((), {}, 5),
        (("skipped", "skipped"), {}, 5),
        (("no_change", "flaky"), {}, 7),
        (("flaky", "regression"), {}, 1),
        (("skipped", "no_change"), {}, 0),
    ],
)
def test_comparison_exit_code_policy(
    verdicts: tuple[str, ...], extra: dict[str, object], code: int
) -> None:
    assert _comparison(*verdicts, **extra).exit_code() == code


def test_run_and_compare_share_the_precedence() -> None:
    """The run report's exit code comes from the same function: input error before
    incomplete before failure."""
    rep = RunReport(
        "r",
        "",
        "",
        (),
        "cpu",
        {},
        (result(att("failed", error="E"), status="failed"),),
    )
    assert exit_code(rep) == 1
    assert exit_code(replace(rep, interrupted=True)) == 3
    assert exit_code(replace(rep, interrupted=True, load_errors=(LoadError("a", "b"),))) == 2


def test_simulated_session_keeps_buying_rounds_for_a_head_only_failure() -> None:
    """Head fails its second measured run only: the session does not settle the case at its
    first look (3 rounds) but measures the rate to the last look (7), while a clean case
    with a deterministic verdict would stop at 3."""
    from dataclasses import replace as _replace
    from typing import cast

    from simpaired import ITEM, SimulatedPairedRunner

    from harness.compare.latency import LatencySettings
    from harness.compare.session import Session
    from harness.execution.paired import PairedRunner

    class Runner(SimulatedPairedRunner):
        def run_rounds(self, items: Any, rounds: int) -> int:
            n = super().run_rounds(items, rounds)
            got = self.side_attempts("head", ITEM)
            for i, a in enumerate(got):
                if a.round == 1 and a.status == "passed":
                    got[i] = _replace(
                        a, status="failed", error=ErrorInfo.make("ValueError", "raced")
                    )
            return n

    runner = Runner(lambda side, r: {"work": 0.05})
    session = Session(cast(PairedRunner, runner), [ITEM], LatencySettings(), budget_s=None)
    session.run()
    assert runner.next_round == 7
    fm = failure_matrix(runner.result("base", ITEM), runner.result("head", ITEM))
    assert fm.verdict == "new_failure" and "1 of 7 head runs, 0 of 7 base" in (fm.reason or "")
