"""Which failures earn a retry, and the budget estimate."""

from __future__ import annotations

from harness.execution.retry import Budget, retry_class, should_retry
from harness.model import Attempt, ErrorInfo
from harness.platforms.profile import RetryPolicy

POLICY = RetryPolicy(retries=2, retry_on=("infra", "oom", "timeout"), patterns=(r"NCCL timeout",))


def attempt(status: str, etype: str = "", message: str = "", duration: float = 1.0) -> Attempt:
    err = ErrorInfo.make(etype, message) if etype else None
    return Attempt(
        case_id="c",
        platform="cpu",
        index=0,
        status=status,  # type: ignore[arg-type]
        seed=0,
        error=err,
        duration_s=duration,
    )


def test_classes() -> None:
    assert retry_class(attempt("timeout"), POLICY) == "timeout"
    assert (
        retry_class(attempt("error", "HTTPError", "HTTP Error 403: Forbidden"), POLICY) == "infra"
    )
    assert (
        retry_class(attempt("error", "RuntimeError", "wheel download: HTTP 403"), POLICY) == "infra"
    )
    assert (
        retry_class(attempt("error", "RuntimeError", "NCCL timeout in allreduce"), POLICY)
        == "infra"
    )
    assert retry_class(attempt("error", "OutOfMemoryError", "CUDA out of memory"), POLICY) == "oom"
    assert retry_class(attempt("error", "RuntimeError", "HIP out of memory"), POLICY) == "oom"
    assert retry_class(attempt("error", "ValueError", "bad shape 3 vs 4"), POLICY) is None
    crash = Attempt(
        case_id="c",
        platform="cpu",
        index=0,
        status="crashed",
        seed=0,
        error=ErrorInfo("WorkerCrashed", "worker killed by SIGKILL", "x"),
    )
    assert retry_class(crash, POLICY) == "oom"


def test_failed_check_or_assertion_is_never_retried() -> None:
    failed = attempt("failed", "AssertionError", "HTTP 503 in an assertion message")
    assert should_retry(failed, POLICY) is None


def test_policy_limits_classes() -> None:
    only_infra = RetryPolicy(retries=1, retry_on=("infra",))
    assert should_retry(attempt("timeout"), only_infra) is None
    assert should_retry(attempt("error", "ConnectionError", "refused"), only_infra) == "infra"


def test_budget_estimate_and_fit() -> None:
    own = [attempt("error", duration=2.0), attempt("error", duration=3.0)]
    assert Budget.estimate(own, []) == 3.0
    others = [attempt("passed", duration=d) for d in (1.0, 5.0, 2.0)]
    assert Budget.estimate([], others) == 2.0
    fits, left = Budget(total_s=None).fits(100.0)
    assert fits and left is None
    fits, left = Budget(total_s=1.0).fits(5.0)
    assert not fits and left is not None and left <= 1.0
