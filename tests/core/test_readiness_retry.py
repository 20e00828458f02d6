"""A readiness timeout is not retried blindly: the platform policy's retry.readiness_timeout
decides, from the attempt's hang diagnosis, and the attempt records why it was or was not
retried (``retried_because`` / ``not_retried``)."""

from __future__ import annotations

from collections.abc import Iterator

from harness.execution.retry import Budget, with_retries
from harness.model import Attempt, ErrorInfo
from harness.model.hang import HangDiagnosis, ProcessDiagnosis
from harness.platforms.profile import RetryPolicy

DEFAULT = "once_if_logs_growing (harness default)"


def diagnosis(growing: bool) -> HangDiagnosis:
    proc = ProcessDiagnosis(
        pid=7, ppid=1, command="serve", rank=0, rank_source="", cpu_percent=99.0,
        log="/x/server.log", log_growing=growing, log_grew_bytes=120 if growing else 0,
        last_line="loading shard 3", last_line_age_s=0.1, stack_method="py-spy", stack="",
    )  # fmt: skip
    return HangDiagnosis("readiness timeout", "t", 1.5, 10.0, 1.0, (proc,))


def not_ready(retry: int, growing: bool | None, etype: str = "ServerNotReady") -> Attempt:
    return Attempt(
        "c", "cpu", retry, "timeout", 0, retry=retry,
        error=ErrorInfo.make(etype, "the server was not ready within 600 s"),
        hang=diagnosis(growing) if growing is not None else None,
    )  # fmt: skip


def tries(
    growing: list[bool | None], readiness: str = DEFAULT, retries: int = 3, etype: str = ""
) -> list[Attempt]:
    recorded: list[Attempt] = []
    feed: Iterator[bool | None] = iter(growing)
    with_retries(
        lambda retry: not_ready(retry, next(feed), etype or "ServerNotReady"),
        policy=RetryPolicy(retries=retries, readiness=readiness),
        budget=Budget(None),
        case_attempts=recorded,
        all_attempts=recorded,
        record=recorded.append,
        stop=lambda: False,
    )
    return recorded


def test_a_stuck_server_is_not_retried_and_the_attempt_says_why() -> None:
    (only,) = tries([False, False])
    assert only.not_retried == (
        "not retried: the server looked stuck: no process's log grew in the last 1.0 s before "
        f"the kill (platform policy retry.readiness_timeout = {DEFAULT})"
    )
    assert not only.retried_because


def test_growing_logs_earn_one_retry_and_no_more() -> None:
    first, second = tries([True, True, True])
    assert first.retried_because == (
        "retried: logs still growing in the last 1.0 s: /x/server.log +120 bytes "
        f"(platform policy retry.readiness_timeout = {DEFAULT})"
    )
    assert not first.not_retried
    assert second.not_retried.startswith("not retried: a readiness timeout is retried at most once")


def test_policy_never_declines_even_growing_logs() -> None:
    (only,) = tries([True, True], readiness="never (runner strict)")
    assert only.not_retried == (
        "not retried: a readiness timeout is never retried "
        "(platform policy retry.readiness_timeout = never (runner strict))"
    )


def test_without_a_diagnosis_or_retries_left_it_is_not_retried() -> None:
    (no_diagnosis,) = tries([None, None])
    assert "no hang diagnosis says the server was still making progress" in (
        no_diagnosis.not_retried
    )
    (no_retries,) = tries([True, True], retries=0)
    assert "the case allows no retry (retries = 0)" in no_retries.not_retried


def test_other_timeouts_keep_the_ordinary_retry_policy() -> None:
    # a request timeout is a timeout like any other: retried while retries remain
    attempts = tries([False, False, False], retries=2, etype="ServerRequestTimeout")
    assert len(attempts) == 3 and not any(a.not_retried for a in attempts)
