"""The plain, frozen records that flow between the stages: attempts, checks, case results, runs.

Each record converts to and from the JSON of ``report.json`` (``to_json`` / ``from_json``);
the JSON Schema in ``harness/schema/report.schema.json`` describes the same shape.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from harness.model.coverage import CoverageRecord
from harness.model.exits import exit_status
from harness.model.hang import HangDiagnosis
from harness.model.infra import InfraFinding, infra_only, infrastructure_findings
from harness.model.layers import ReferenceLayers
from harness.model.ranks import RanksRecord
from harness.model.shard import INCOMPLETE_CAUSES, MergedShard, MissingCase, ShardInfo
from harness.model.vocab import (
    FAILING,
    STATUSES,
    Policy,
    Side,
    Status,
    display_name,
    json_number,
    number_from_json,
)

SCHEMA_VERSION = 2


def error_signature(exc_type: str, message: str, where: str = "") -> str:
    """A short stable id for "the same failure": the exception type, its first message line
    with numbers, addresses and paths blanked, and ``where`` it was raised (the innermost frame
    in the code under test, ``module:function``; line numbers left out, so an unrelated edit
    above it does not change the signature).

    >>> error_signature("ValueError", "bad shape 3", "tinyav.model:forward")[:31]
    'ValueError@tinyav.model:forward'
    """
    first = message.strip().splitlines()[0] if message.strip() else ""
    norm = re.sub(r"0x[0-9a-fA-F]+", "0x?", first)
    norm = re.sub(r"(/[^\s:'\"]+)+", "<path>", norm)
    norm = re.sub(r"\d+(\.\d+)?", "N", norm)
    digest = hashlib.sha256(f"{exc_type}:{norm}:{where}".encode()).hexdigest()[:12]
    return f"{exc_type}@{where}:{digest}" if where else f"{exc_type}:{digest}"


def signature_type(signature: str) -> str:
    """The exception type an :func:`error_signature` was made from.

    >>> signature_type("SyntaxError@tinyav.model:<module>:0123abcd4567")
    'SyntaxError'
    """
    return re.split(r"[@:]", signature, maxsplit=1)[0]


@dataclass(frozen=True)
class ErrorInfo:
    """Why an attempt did not pass. ``signature`` groups equal failures across attempts/sides."""

    type: str
    message: str
    signature: str
    traceback: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "message": self.message,
            "signature": self.signature,
            "traceback": self.traceback,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ErrorInfo:
        return cls(d["type"], d["message"], d["signature"], d.get("traceback", ""))

    @classmethod
    def make(cls, exc_type: str, message: str, tb: str = "", where: str = "") -> ErrorInfo:
        """An error with its signature computed from the type, the message and where."""
        return cls(exc_type, message, error_signature(exc_type, message, where), tb)


@dataclass(frozen=True)
class CheckResult:
    """One check's outcome. ``passed`` is None when it could not run (``reason`` says why)."""

    name: str
    metric: str
    value: Any
    op: str
    threshold: Any
    policy: Policy
    passed: bool | None
    output: str | None = None
    reason: str | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)
    # Explanation table rows: frame, obtained, threshold (and whatever else explains it).
    details: tuple[Mapping[str, Any], ...] = ()

    @property
    def blocking(self) -> bool:
        """A failed ``fail``-policy check fails its case; ``warn`` only reports."""
        return self.passed is False and self.policy == "fail"

    @property
    def simulated(self) -> bool:
        """Not run because it asserts what ran on hardware a simulated platform does not have
        (``needs_device``); it never blocks the case, whose result is labelled simulated."""
        return self.passed is None and self.settings.get("not_run") == "simulated"

    @property
    def contention(self) -> bool:
        """A latency budget that wall time overran and the code's own time (wall time less
        run-queue delay) met: other processes' load, labelled ``contention`` with its figures
        (``settings``: ``wall_s``, ``wait_s``, ``budget_s``) in every report; it neither fails
        the case nor passes silently."""
        return self.passed is True and self.settings.get("contention") is True

    @property
    def unjudged(self) -> bool:
        """A ``fail``-policy check that could not run: the case cannot pass without it."""
        return self.passed is None and self.policy == "fail" and not self.simulated

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "metric": self.metric,
            "value": json_number(self.value),
            "op": self.op,
            "threshold": json_number(self.threshold),
            "policy": self.policy,
            "passed": self.passed,
            "output": self.output,
            "reason": self.reason,
            "settings": dict(self.settings),
            "details": [{k: json_number(v) for k, v in row.items()} for row in self.details],
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> CheckResult:
        return cls(
            name=d["name"],
            metric=d["metric"],
            value=number_from_json(d.get("value")),
            op=d["op"],
            threshold=number_from_json(d.get("threshold")),
            policy=d.get("policy", "fail"),
            passed=d.get("passed"),
            output=d.get("output"),
            reason=d.get("reason"),
            settings=d.get("settings", {}),
            details=tuple(
                {k: number_from_json(v) for k, v in row.items()} for row in d.get("details", [])
            ),
        )


# Attempt fields left out of the JSON when empty (newer, optional fields of the record).
_OMIT_EMPTY = frozenset(
    {
        "stage_device",
        "stage_memory",
        "stage_cpu",
        "stage_wait",
        "wait_s",
        "infra",
        "not_retried",
        "retried_because",
        "hang",
        "ranks",
        "intermediates",
        "reference_layers",
    }
)


@dataclass(frozen=True)
class Attempt:
    """One execution of one case on one platform, recorded whatever happened."""

    case_id: str
    platform: str
    index: int
    status: Status
    seed: int | None
    warmup: bool = False
    retry: int = 0  # 0 for the first try of a measured run, n for its n-th retry
    repeat: int = 0  # which measured run (0-based) this attempt belongs to
    inputs: Mapping[str, str] = field(default_factory=dict)
    stages: Mapping[str, float] = field(default_factory=dict)
    fingerprints: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    metrics: Mapping[str, Any] = field(default_factory=dict)
    notes: Mapping[str, Any] = field(default_factory=dict)
    outputs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    checks: tuple[CheckResult, ...] = ()
    error: ErrorInfo | None = None
    duration_s: float = 0.0
    worker_pid: int | None = None
    started_at: str = ""
    fresh_process: bool = False
    side: Side = "head"
    round: int = 0  # comparison round (interleaved schedules); 0 in a plain run
    # Per stage, where the platform measures them (absent from the JSON otherwise, e.g. on the
    # CPU): device seconds from device events, and peak allocated device bytes.
    stage_device: Mapping[str, float] = field(default_factory=dict)
    stage_memory: Mapping[str, int] = field(default_factory=dict)
    # Per stage, on Linux: the process's CPU seconds and its run-queue delay (seconds its
    # threads were runnable but not running: other processes' load) while the stage was open;
    # ``wait_s`` is the whole attempt's run-queue delay (beside ``duration_s``). Absent where
    # the kernel does not expose them.
    stage_cpu: Mapping[str, float] = field(default_factory=dict)
    stage_wait: Mapping[str, float] = field(default_factory=dict)
    wait_s: float = 0.0
    # An infrastructure failure (retry class ``infra``): its signature (harness.model.infra),
    # and, when the retry budget was not spent on it, why ("not retried: same infrastructure
    # failure twice (...)"). Absent from the JSON when empty.
    infra: str = ""
    not_retried: str = ""
    # Why this failed attempt was retried when a policy, not the failure's class alone, allowed
    # it (a readiness timeout whose logs were still growing). Absent from the JSON when empty.
    retried_because: str = ""
    # A timeout's hang diagnosis (harness.model.hang), taken before the kill; absent when None.
    hang: HangDiagnosis | None = None
    # A multi-rank attempt's per-rank record (harness.model.ranks); absent when None.
    ranks: RanksRecord | None = None
    # The layer samples the attempt recorded for a layered reference (``path`` of the
    # safetensors file in the run, its ``sha256``, ``rule``, ``count``) and, when its quality
    # checks failed or the run asked ``--explain``, where it first left the layered reference
    # (harness.model.layers). Both absent when empty.
    intermediates: Mapping[str, Any] = field(default_factory=dict)
    reference_layers: ReferenceLayers | None = None

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name in _OMIT_EMPTY and not v:
                continue
            if f.name == "checks":
                v = [c.to_json() for c in v]
            elif f.name in ("error", "hang", "ranks", "reference_layers"):
                v = v.to_json() if v is not None else None
            elif f.name == "metrics":
                v = {k: json_number(x) for k, x in v.items()}
            elif isinstance(v, Mapping):
                v = dict(v)
            d[f.name] = v
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Attempt:
        kw = {f.name: d[f.name] for f in fields(cls) if f.name in d}
        kw["checks"] = tuple(CheckResult.from_json(c) for c in d.get("checks", []))
        kw["error"] = ErrorInfo.from_json(d["error"]) if d.get("error") else None
        kw["hang"] = HangDiagnosis.from_json(d["hang"]) if d.get("hang") else None
        kw["ranks"] = RanksRecord.from_json(d["ranks"]) if d.get("ranks") else None
        layers = d.get("reference_layers")
        kw["reference_layers"] = ReferenceLayers.from_json(layers) if layers else None
        kw["metrics"] = {k: number_from_json(v) for k, v in d.get("metrics", {}).items()}
        return cls(**kw)

    def with_status(self, status: Status, error: ErrorInfo | None = None) -> Attempt:
        return replace(self, status=status, error=error if error is not None else self.error)


@dataclass(frozen=True)
class CaseResult:
    """The verdict on one case on one platform, with every attempt that led to it."""

    id: str
    kind: str
    platform: str
    status: Status
    simulated: bool = False
    source: str = ""
    reason: str | None = None
    checks: tuple[CheckResult, ...] = ()
    attempts: tuple[Attempt, ...] = ()
    seed: int | None = None
    repeats: int = 1
    reference: str | None = None  # the reference id its quality checks use (bless writes it)
    side: Side = "head"
    # The platform identity the attempts ran as (harness.platforms.Identity JSON: platform,
    # arch, fp8, capabilities, simulated, reason, ...); None when no attempt ran.
    identity: Mapping[str, Any] | None = None
    # The platform policy that judged this result: setting -> {value, rule, source}
    # (harness.platforms.policy.Decision), e.g. "latency.on_fail" -> {"value": "warn",
    # "rule": "platform hip default", "source": ".../policy.toml"}.
    policy: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # Line coverage from a dedicated coverage attempt (outside the timed runs); None: not taken.
    coverage: CoverageRecord | None = None

    @property
    def warnings(self) -> tuple[CheckResult, ...]:
        """Checks that failed under a ``warn`` policy: reported everywhere, never a silent pass."""
        return tuple(c for c in self.checks if c.passed is False and c.policy == "warn")

    @property
    def contention(self) -> tuple[CheckResult, ...]:
        """Latency budgets met only once run-queue delay is taken out (:attr:`CheckResult.
        contention`): reported everywhere as contention, never failed, never a silent pass."""
        return tuple(c for c in self.checks if c.contention)

    @property
    def name(self) -> str:
        """Display name, e.g. ``pipeline/t2va-int8[cpu]``."""
        return display_name(self.kind, self.id, self.platform)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "platform": self.platform,
            "simulated": self.simulated,
            "status": self.status,
            "source": self.source,
            "reason": self.reason,
            "seed": self.seed,
            "repeats": self.repeats,
            "reference": self.reference,
            "side": self.side,
            "identity": dict(self.identity) if self.identity is not None else None,
            "policy": {k: dict(v) for k, v in self.policy.items()},
            "checks": [c.to_json() for c in self.checks],
            "attempts": [a.to_json() for a in self.attempts],
            **({"coverage": self.coverage.to_json()} if self.coverage is not None else {}),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> CaseResult:
        return cls(
            id=d["id"],
            kind=d["kind"],
            platform=d["platform"],
            status=d["status"],
            simulated=d.get("simulated", False),
            source=d.get("source", ""),
            reason=d.get("reason"),
            checks=tuple(CheckResult.from_json(c) for c in d.get("checks", [])),
            attempts=tuple(Attempt.from_json(a) for a in d.get("attempts", [])),
            seed=d.get("seed"),
            repeats=d.get("repeats", 1),
            reference=d.get("reference"),
            side=d.get("side", "head"),
            identity=d.get("identity"),
            policy=d.get("policy", {}),
            coverage=CoverageRecord.from_json(d["coverage"]) if d.get("coverage") else None,
        )


@dataclass(frozen=True)
class LoadError:
    """A case file (or a case in it) that did not load: the run goes on without it."""

    path: str
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "message": self.message}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> LoadError:
        return cls(str(d["path"]), str(d["message"]))


@dataclass(frozen=True)
class RunReport:
    """Everything one run produced; the single source of every rendering."""

    run_id: str
    started_at: str
    finished_at: str
    argv: tuple[str, ...]
    runner: str
    env: Mapping[str, Any]
    cases: tuple[CaseResult, ...]
    interrupted: bool = False
    budget_s: float | None = None
    load_errors: tuple[LoadError, ...] = ()
    # Harness faults (a worker protocol violation, a bug in the harness): the run is incomplete.
    infra_errors: tuple[str, ...] = ()
    schema_version: int = SCHEMA_VERSION
    # Sharded runs (harness run --shard, harness merge): the plan this report is part of, the
    # planned cases it has no result for (and why), and, merged, the shard reports it joins.
    shard: ShardInfo | None = None
    missing: tuple[MissingCase, ...] = ()
    merged_from: tuple[MergedShard, ...] = ()
    # harness run --changed-since: the cases kept and left out, and why (None: no selection).
    selection: Mapping[str, Any] | None = None

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(STATUSES, 0)
        for c in self.cases:
            out[c.status] += 1
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "run_id": self.run_id,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "argv": list(self.argv),
            "runner": self.runner,
            "interrupted": self.interrupted,
            "budget_s": self.budget_s,
            "summary": self.counts(),
            "env": dict(self.env),
            "load_errors": [e.to_json() for e in self.load_errors],
            "infra_errors": list(self.infra_errors),
            "cases": [c.to_json() for c in self.cases],
            **({"shard": self.shard.to_json()} if self.shard is not None else {}),
            **({"missing": [m.to_json() for m in self.missing]} if self.missing else {}),
            **(
                {"merged_from": [m.to_json() for m in self.merged_from]} if self.merged_from else {}
            ),
            **(
                {"infrastructure": [f.to_json() for f in self.infrastructure]}
                if self.infrastructure
                else {}
            ),
            **({"selection": dict(self.selection)} if self.selection is not None else {}),
        }

    @property
    def infrastructure(self) -> tuple[InfraFinding, ...]:
        """Infrastructure signatures repeated across cases or attempts (harness.model.infra);
        derived from the attempts, so a merged or re-read report says the same."""
        return infrastructure_findings(self.cases)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> RunReport:
        return cls(
            run_id=d["run_id"],
            started_at=d["started_at"],
            finished_at=d["finished_at"],
            argv=tuple(d.get("argv", [])),
            runner=d.get("runner", ""),
            env=d.get("env", {}),
            cases=tuple(CaseResult.from_json(c) for c in d.get("cases", [])),
            interrupted=d.get("interrupted", False),
            budget_s=d.get("budget_s"),
            load_errors=tuple(LoadError.from_json(e) for e in d.get("load_errors", [])),
            infra_errors=tuple(str(e) for e in d.get("infra_errors", [])),
            schema_version=d.get("schema_version", SCHEMA_VERSION),
            shard=ShardInfo.from_json(d["shard"]) if d.get("shard") else None,
            missing=tuple(MissingCase.from_json(m) for m in d.get("missing", [])),
            merged_from=tuple(MergedShard.from_json(m) for m in d.get("merged_from", [])),
            selection=d.get("selection"),
        )

    @property
    def complete(self) -> bool:
        """False when the run was interrupted, the harness itself failed somewhere, or a
        planned case has no result nobody can explain by a failure (a shard report absent, a
        shard that did not report a case)."""
        return (
            not self.interrupted
            and not self.infra_errors
            and not any(m.cause in INCOMPLETE_CAUSES for m in self.missing)
        )


def exit_code(report: RunReport) -> int:
    """DESIGN's exit codes (:func:`harness.model.exits.exit_status`): 2 input error, 3
    infrastructure or incomplete, 1 a failure, 5 nothing ran, 7 only flaky, 0 clean. A missing
    planned case is never a pass: one whose shard is absent or unreported makes the run
    incomplete (3); one not run after a failure (``--fail-fast``) or a declined budget is a
    failure of the run (1)."""
    findings = report.infrastructure
    failing = [c for c in report.cases if c.status in FAILING | {"budget_declined"}]
    code_failed = [c for c in failing if not infra_only(c, findings)]
    return exit_status(
        input_error=bool(report.load_errors),
        # Cases that failed only on a repeated infrastructure signature are not a code
        # failure: the run is 3, unless some other case failed on its code (1 wins then).
        incomplete=not report.complete or (len(code_failed) < len(failing) and not code_failed),
        failed=bool(code_failed or report.missing),
        # Nothing ran: no attempt, or only the attempts of cases a worker skipped (`requires`).
        nothing_ran=not any(c.attempts for c in report.cases if c.status != "skipped"),
        only_flaky="flaky" in {c.status for c in report.cases},
    )
