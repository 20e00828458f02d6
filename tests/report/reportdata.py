"""Synthetic run reports and comparisons for the renderer tests, and a Markdown table reader.

A module with a unique name, not conftest: several test folders have a conftest.
"""

from __future__ import annotations

from typing import Any

from markdown_it import MarkdownIt

from harness.model import (
    Attempt,
    CaseComparison,
    CaseResult,
    CheckResult,
    Comparison,
    Divergence,
    ErrorInfo,
    FailureMatrix,
    RunReport,
    SideInfo,
    StageLatency,
)
from harness.model.hang import HangDiagnosis, ProcessDiagnosis


def attempt(case_id: str, status: str, message: str = "", index: int = 0) -> Attempt:
    error = ErrorInfo.make("ValueError", message) if message else None
    return Attempt(case_id, "cpu", index, status, 0, error=error, duration_s=0.25)  # type: ignore[arg-type]


def rank_process(rank: int, where: str, growing: bool) -> ProcessDiagnosis:
    stack = (
        f'Thread {100 + rank} (idle): "MainThread"\n    {where} (serve.py:{40 + rank})\n'
        "    main (serve.py:9)\n    <script>alert(5)</script> (evil.py:1)\n"
    )
    return ProcessDiagnosis(
        pid=100 + rank, ppid=99 + rank, command=f"python -m tinyav.serve rank {rank}",
        rank=rank, rank_source="RANK in its environment", cpu_percent=99.5 if rank else 0.0,
        log=f"/runs/r/server/rank{rank}.log", log_growing=growing,
        log_grew_bytes=40 if growing else 0, last_line=f"rank {rank}: tile 3 | decode <b>",
        last_line_age_s=1.25, stack_method="py-spy --native", stack=stack,
        where=f"{where} (serve.py:{40 + rank})",
    )  # fmt: skip


def hang_case() -> CaseResult:
    """A two-rank server that was not ready in time: rank 0 waits in the collective rank 1
    never joined, and its hang diagnosis (markup in its stacks and log lines)."""
    hang = HangDiagnosis(
        trigger="readiness timeout", captured_at="2026-12-01T10:01:00+00:00", seconds=1.6,
        deadline_s=10.0, window_s=1.0,
        processes=(rank_process(0, "all_reduce", False), rank_process(1, "decode_tile", True)),
        device="not available here",
    )  # fmt: skip
    error = ErrorInfo.make("ServerNotReady", "the server was not ready within 2 s")
    not_ready = Attempt(
        "tp2-hang", "cpu", 0, "timeout", 0, error=error, duration_s=4.0, hang=hang,
        not_retried="not retried: a readiness timeout is never retried (platform policy)",
    )  # fmt: skip
    return case("tp2-hang", "timeout", attempts=(not_ready,), kind="server")


def case(
    case_id: str,
    status: str = "passed",
    *,
    checks: tuple[CheckResult, ...] = (),
    attempts: tuple[Attempt, ...] | None = None,
    simulated: bool = False,
    reason: str | None = None,
    kind: str = "loader",
) -> CaseResult:
    return CaseResult(
        case_id,
        kind,
        "cpu",
        status,  # type: ignore[arg-type]
        simulated=simulated,
        source="cases/x.toml",
        reason=reason,
        checks=checks,
        attempts=attempts if attempts is not None else (attempt(case_id, status),),
    )


def check(
    name: str, value: Any, op: str, threshold: Any, passed: bool | None, policy: str = "fail"
) -> CheckResult:
    return CheckResult(name, name, value, op, threshold, policy, passed)  # type: ignore[arg-type]


def report(*cases: CaseResult, **kw: Any) -> RunReport:
    fields: dict[str, Any] = {
        "run_id": "r1",
        "started_at": "2026-12-01T10:00:00+00:00",
        "finished_at": "2026-12-01T10:02:31+00:00",
        "argv": ("harness", "run"),
        "runner": "cpu",
        "env": {"git": {"sha": "0123456789abcdef", "dirty": False}},
        "cases": cases,
    }
    return RunReport(**{**fields, **kw})


def case_comparison(case_id: str, verdict: str, **kw: Any) -> CaseComparison:
    fields: dict[str, Any] = {
        "id": case_id,
        "kind": "pipeline",
        "platform": "cpu",
        "verdict": verdict,
        "latency_verdict": "no_change",
        "quality_verdict": "no_change",
        "failures": FailureMatrix("no_change", 3, 0, 3, 0),
        "divergence": Divergence("none"),
    }
    return CaseComparison(**{**fields, **kw})


def regression(case_id: str) -> CaseComparison:
    return case_comparison(
        case_id,
        "regression",
        latency_verdict="regression",
        latency=(
            StageLatency("DenoisingStage", "regression", ratio=1.31, ci_low=1.22, ci_high=1.4),
        ),
        divergence=Divergence("stage", "denoise.step00", {"step": 0}),
    )


def comparison(*cases: CaseComparison, **kw: Any) -> Comparison:
    fields: dict[str, Any] = {
        "id": "cmp1",
        "base": SideInfo("main", "b1", "d"),
        "head": SideInfo("HEAD", "h1", "d"),
        "same_runner": True,
        "cases": cases,
        "runner": "cpu",
        "rounds": 3,
    }
    return Comparison(**{**fields, **kw})


def table_rows(markdown: str) -> list[list[str]]:
    """Every table row's cells (the inline source of each), in document order."""
    tokens = MarkdownIt("commonmark").enable("table").parse(markdown)
    rows: list[list[str]] = []
    for i, tok in enumerate(tokens):
        if tok.type == "tr_open":
            rows.append([])
        elif tok.type == "inline" and tokens[i - 1].type in ("th_open", "td_open"):
            rows[-1].append(tok.content)
        elif tok.type in ("th_close", "td_close") and tokens[i - 1].type in ("th_open", "td_open"):
            rows[-1].append("")  # an empty cell has no inline token
    return rows


def html(markdown: str) -> str:
    return MarkdownIt("commonmark").enable("table").render(markdown)
