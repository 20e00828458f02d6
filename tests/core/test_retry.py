"""Which failures earn a retry, and the budget estimate."""

from __future__ import annotations

from harness.execution.retry import (
    INFRA_HTTP_CODES,
    OOM_EVIDENCE,
    Budget,
    oom_kill_count,
    retry_class,
    should_retry,
)
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
    no_gpu = attempt("error", "RuntimeError", "No CUDA GPUs are available")
    assert retry_class(no_gpu, POLICY) == "infra"  # a device the runner lacks
    assert retry_class(attempt("error", "RuntimeError", "HIP out of memory"), POLICY) == "oom"
    assert retry_class(attempt("error", "ValueError", "bad shape 3 vs 4"), POLICY) is None
    assert retry_class(attempt("error", "RuntimeError", "hipErrorOutOfMemory"), POLICY) == "oom"
    assert retry_class(attempt("error", "ValueError", "bad shape 3 vs 4"), POLICY) is None


def crashed(message: str) -> Attempt:
    return Attempt(
        case_id="c",
        platform="cpu",
        index=0,
        status="crashed",
        seed=0,
        error=ErrorInfo("WorkerCrashed", message, "x"),
    )


def test_sigkill_is_oom_only_with_the_kernels_word() -> None:
    assert retry_class(crashed("worker killed by SIGKILL"), POLICY) == "crashed"
    assert should_retry(crashed("worker killed by SIGKILL"), POLICY) is None
    evidence = f"worker killed by SIGKILL ({OOM_EVIDENCE} from 0 to 1)"
    assert retry_class(crashed(evidence), POLICY) == "oom"


def test_kernel_faults_are_failures_even_if_a_profile_pattern_matches() -> None:
    greedy = RetryPolicy(retries=2, patterns=("CUDA error", "HIP error"))
    for message in (
        "CUDA error: an illegal memory access was encountered",
        "HIP error: hipErrorIllegalAddress",
        "Memory access fault by GPU node-2 on address 0x7f00",
        "CUDA error: device-side assert triggered",
    ):
        assert should_retry(attempt("error", "RuntimeError", message), greedy) is None, message
    assert should_retry(attempt("error", "RuntimeError", "HIP error: timeout"), greedy) == "infra"


def test_http_404_is_not_infrastructure_but_403_429_5xx_are() -> None:
    assert (
        retry_class(attempt("error", "RuntimeError", "HTTP Error 404: Not Found"), POLICY) is None
    )
    for code in ("403", "408", "429", "500", "503"):
        msg = f"HTTP Error {code}: x"
        assert retry_class(attempt("error", "RuntimeError", msg), POLICY) == "infra", code
    assert INFRA_HTTP_CODES == ("403", "408", "429", "5xx")


def test_a_harness_bug_is_never_retried() -> None:
    bug = attempt("error", "HarnessInternalError", "KeyError: 'threshold' in check evaluation")
    assert retry_class(bug, POLICY) is None


def test_oom_kill_count_reads_cgroup_v1_and_v2_files(tmp_path) -> None:
    v2 = tmp_path / "memory.events"
    v2.write_text("low 0\nhigh 0\nmax 3\noom 2\noom_kill 2\n")
    v1 = tmp_path / "memory.oom_control"
    v1.write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 5\n")
    assert oom_kill_count([str(v2)]) == 2
    assert oom_kill_count([str(tmp_path / "absent"), str(v1)]) == 5
    assert oom_kill_count([str(tmp_path / "absent")]) is None


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
