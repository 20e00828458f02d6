"""The frozen records of a comparison of base and head: the single source of every rendering.

``Comparison.to_json`` / ``from_json`` give ``comparison.json``; the JSON Schema in
``harness/report/schemas/comparison.schema.json`` describes the same shape. Verdict names are
DESIGN's closed set (:data:`VERDICTS`); quality findings add ``changed`` (outputs differ,
within the margin).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from harness.model.drift import Drift, EnvDiff
from harness.model.exits import exit_status
from harness.model.vocab import json_safe, number_from_json

COMPARISON_SCHEMA_VERSION = 1

Verdict = Literal[
    "regression",
    "improvement",
    "no_change",
    "inconclusive",
    "suspect",
    "new_failure",
    "pre_existing_failure",
    "fixed",
    "flaky",
    "not_comparable",
    "infrastructure",
    "missing",
    "skipped",
]
# Worst first: a case's verdict is the first of these that any of its parts reached.
VERDICTS: tuple[str, ...] = (
    "not_comparable",
    "infrastructure",
    "new_failure",
    "regression",
    "flaky",
    "suspect",
    "missing",
    "inconclusive",
    "pre_existing_failure",
    "fixed",
    "improvement",
    "skipped",
    "no_change",
)
QualityVerdict = Literal["no_change", "changed", "regression", "improvement", "missing"]
DivergenceKind = Literal["none", "inputs", "stage", "nonfinite", "missing"]
# Verdicts that make `harness compare` exit 1 (with --strict also inconclusive and suspect).
BLOCKING: frozenset[str] = frozenset({"regression", "new_failure"})
STRICT_BLOCKING: frozenset[str] = BLOCKING | {"inconclusive", "suspect", "flaky"}
# Verdicts of a comparison that did not compare: a side that never ran, a case the budget
# never reached, code from the wrong place, both sides stopped by the same infrastructure
# failure (harness.model.infra). Never green: exit 3 (DESIGN "Exit codes").
INCOMPLETE: frozenset[str] = frozenset({"missing", "not_comparable", "infrastructure"})


def worst_verdict(verdicts: list[str]) -> str:
    """The most severe of ``verdicts`` by :data:`VERDICTS`; ``no_change`` for none."""
    known = [v for v in verdicts if v in VERDICTS]
    return min(known, key=VERDICTS.index) if known else "no_change"


def _num(d: Mapping[str, Any], key: str) -> Any:
    return number_from_json(d.get(key))


@dataclass(frozen=True)
class StageLatency:
    """One stage's latency verdict, base vs head (ratios head / base, seconds per round)."""

    stage: str
    verdict: str
    ratio: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    p: float | None = None
    n_base: int = 0
    n_head: int = 0
    margin: float | None = None
    noise: float | None = None
    base_median_s: float | None = None
    head_median_s: float | None = None
    judged: bool = True  # False: too short to time (its verdict does not count)
    unstable: bool = False
    unstable_reason: str | None = None
    reason: str | None = None
    confirmation: str | None = None  # the fresh batch's verdict, when one ran

    def to_json(self) -> dict[str, Any]:
        return json_safe(dict(self.__dict__))

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> StageLatency:
        return cls(**{k: number_from_json(v) for k, v in d.items()})


@dataclass(frozen=True)
class QualityFinding:
    """One metric of one output: base vs reference, head vs reference, head vs base."""

    output: str
    metric: str
    verdict: str
    higher_is_better: bool = True
    base_vs_ref: float | None = None
    head_vs_ref: float | None = None
    head_vs_base: float | None = None  # the metric of head's output against base's
    identical: bool | None = None  # head's output bit-identical to base's
    base_spread: float | None = None  # range of base vs reference over base's repeats
    margin: float | None = None
    margin_source: str = "default"
    reason: str | None = None
    # Every frame of the output was compared (clips for audio, one for an image or tensor):
    frames: int | None = None  # how many
    worst_frame: int | None = None  # where head lost most against base (else differs most)
    reference: str | None = None  # the entry the sides were compared with, ref/class/output
    reference_platform: str | None = None  # the platform that entry was blessed on
    # A simulated platform judged against a reference blessed on another platform: a change
    # towards it is never an improvement.
    foreign_reference: bool = False

    def to_json(self) -> dict[str, Any]:
        return json_safe(dict(self.__dict__))

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> QualityFinding:
        return cls(**{k: number_from_json(v) for k, v in d.items()})


@dataclass(frozen=True)
class FailureMatrix:
    """Pass/fail counts per side over measured runs, and the error signatures seen."""

    verdict: str
    base_passed: int = 0
    base_failed: int = 0
    head_passed: int = 0
    head_failed: int = 0
    base_signatures: tuple[str, ...] = ()
    head_signatures: tuple[str, ...] = ()
    p_head_worse: float | None = None  # one-sided Fisher exact p (flaky cases)
    reason: str | None = None
    head_only: tuple[str, ...] = ()  # signatures seen on head and never on base
    base_runs: int = 0  # runs that ran (warm-ups included): a signature's rate is of these
    head_runs: int = 0
    base_retried: int = 0  # measured runs that passed only on a retry
    head_retried: int = 0
    known_flaky: str | None = None  # the case file's reason, when it declares it known-flaky

    def to_json(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        for k in ("base_signatures", "head_signatures", "head_only"):
            d[k] = list(d[k])
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> FailureMatrix:
        kw = dict(d)
        for k in ("base_signatures", "head_signatures", "head_only"):
            kw[k] = tuple(d.get(k, ()))
        return cls(**kw)


@dataclass(frozen=True)
class Divergence:
    """Where base and head first differ for the same case and seed."""

    kind: str  # DivergenceKind
    first: str | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "first": self.first, "detail": json_safe(dict(self.detail))}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Divergence:
        detail = {k: number_from_json(v) for k, v in d.get("detail", {}).items()}
        return cls(d["kind"], d.get("first"), detail)


@dataclass(frozen=True)
class CaseComparison:
    """The verdict on one case on one platform, and the three findings behind it."""

    id: str
    kind: str
    platform: str
    verdict: str
    latency_verdict: str
    quality_verdict: str
    failures: FailureMatrix
    divergence: Divergence
    latency: tuple[StageLatency, ...] = ()
    quality: tuple[QualityFinding, ...] = ()
    rounds: int = 0
    unstable: bool = False
    reason: str | None = None
    # When the sides' environments differ: inputs, first divergence and the differences
    # (harness.model.drift); absent from the JSON otherwise.
    drift: Drift | None = None
    # Diff-aware triage (harness.compare.triage): which of head's changed lines it executed.
    triage: Mapping[str, Any] | None = None

    @property
    def name(self) -> str:
        return f"{self.kind}/{self.id}[{self.platform}]"

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "platform": self.platform,
            "verdict": self.verdict,
            "latency_verdict": self.latency_verdict,
            "quality_verdict": self.quality_verdict,
            "rounds": self.rounds,
            "unstable": self.unstable,
            "reason": self.reason,
            "latency": [s.to_json() for s in self.latency],
            "quality": [q.to_json() for q in self.quality],
            "failures": self.failures.to_json(),
            "divergence": self.divergence.to_json(),
            **({"drift": self.drift.to_json()} if self.drift is not None else {}),
            **({"triage": dict(self.triage)} if self.triage is not None else {}),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> CaseComparison:
        return cls(
            id=d["id"],
            kind=d["kind"],
            platform=d["platform"],
            verdict=d["verdict"],
            latency_verdict=d["latency_verdict"],
            quality_verdict=d["quality_verdict"],
            failures=FailureMatrix.from_json(d["failures"]),
            divergence=Divergence.from_json(d["divergence"]),
            latency=tuple(StageLatency.from_json(s) for s in d.get("latency", [])),
            quality=tuple(QualityFinding.from_json(q) for q in d.get("quality", [])),
            rounds=d.get("rounds", 0),
            unstable=d.get("unstable", False),
            reason=d.get("reason"),
            drift=Drift.from_json(d["drift"]) if d.get("drift") else None,
            triage=d.get("triage"),
        )


@dataclass(frozen=True)
class SideInfo:
    """One side of a comparison: its revision, run, environment digest and imported files."""

    rev: str | None
    run_id: str
    env_digest: str
    sha: str | None = None
    report: str | None = None  # path of the side's report.json, relative to comparison.json
    code_files: Mapping[str, str] = field(default_factory=dict)  # module -> imported file
    env: str | None = None  # --base-env / --head-env as given (a comparison of environments)
    python: str | None = None  # the interpreter that side's workers ran

    def to_json(self) -> dict[str, Any]:
        return {**self.__dict__, "code_files": dict(self.code_files)}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> SideInfo:
        return cls(**{**d, "code_files": dict(d.get("code_files", {}))})


@dataclass(frozen=True)
class Comparison:
    """Everything one comparison found; ``comparison.json``."""

    id: str
    base: SideInfo
    head: SideInfo
    same_runner: bool
    cases: tuple[CaseComparison, ...]
    runner: str = ""
    rounds: int = 0
    started_at: str = ""
    finished_at: str = ""
    argv: tuple[str, ...] = ()
    env_differences: tuple[str, ...] = ()  # fields of the env fingerprint that differ
    allowed_different_env: bool = False
    noise_source: str | None = None  # the runners/noise file whose figures widened margins
    # the runner's calibration as the comparison found it: status (calibrated, stale,
    # uncalibrated), source, note, runner, env_digest, created_at, age_days
    calibration: Mapping[str, Any] | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)  # delta, alpha, looks, margins
    infra_errors: tuple[str, ...] = ()
    env_diff: EnvDiff | None = None  # Python and package versions that differ between sides
    load_errors: tuple[str, ...] = ()  # "side: path: message" for case files that did not load
    diff: Mapping[str, Any] | None = None  # git diff base..head (harness.compare.diff.ChangeSet)
    schema_version: int = COMPARISON_SCHEMA_VERSION

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(VERDICTS, 0)
        for c in self.cases:
            out[c.verdict] = out.get(c.verdict, 0) + 1
        return out

    def exit_code(self, *, strict: bool = False) -> int:
        """DESIGN's one exit-code policy (:func:`harness.model.exits.exit_status`): 2 a case
        file did not load on either side; 3 the harness could not finish or a case did not
        compare (``missing``, ``not_comparable``, ``infrastructure``); 1 a regression or new
        failure (with ``strict`` also inconclusive, suspect, flaky); 5 nothing ran on either
        side; 7 only flaky; 0 otherwise."""
        verdicts = {c.verdict for c in self.cases}
        blocking = STRICT_BLOCKING if strict else BLOCKING
        return exit_status(
            input_error=bool(self.load_errors),
            incomplete=bool(self.infra_errors) or bool(verdicts & INCOMPLETE),
            failed=bool(verdicts & blocking),
            nothing_ran=not (verdicts - {"skipped"}),
            only_flaky="flaky" in verdicts,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "id": self.id,
            "runner": self.runner,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "argv": list(self.argv),
            "base": self.base.to_json(),
            "head": self.head.to_json(),
            "same_runner": self.same_runner,
            "env_differences": list(self.env_differences),
            "allowed_different_env": self.allowed_different_env,
            "rounds": self.rounds,
            "noise_source": self.noise_source,
            "calibration": json_safe(dict(self.calibration)) if self.calibration else None,
            "settings": json_safe(dict(self.settings)),
            "summary": {k: v for k, v in self.counts().items() if v},
            "infra_errors": list(self.infra_errors),
            "env_diff": self.env_diff.to_json() if self.env_diff is not None else None,
            "load_errors": list(self.load_errors),
            "cases": [c.to_json() for c in self.cases],
            **({"diff": dict(self.diff)} if self.diff is not None else {}),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Comparison:
        return cls(
            id=d["id"],
            base=SideInfo.from_json(d["base"]),
            head=SideInfo.from_json(d["head"]),
            same_runner=d["same_runner"],
            cases=tuple(CaseComparison.from_json(c) for c in d.get("cases", [])),
            runner=d.get("runner", ""),
            rounds=d.get("rounds", 0),
            started_at=d.get("started_at", ""),
            finished_at=d.get("finished_at", ""),
            argv=tuple(d.get("argv", [])),
            env_differences=tuple(d.get("env_differences", [])),
            allowed_different_env=d.get("allowed_different_env", False),
            noise_source=d.get("noise_source"),
            calibration=d.get("calibration"),
            settings=dict(d.get("settings", {})),
            infra_errors=tuple(d.get("infra_errors", [])),
            env_diff=EnvDiff.from_json(d["env_diff"]) if d.get("env_diff") is not None else None,
            load_errors=tuple(d.get("load_errors", [])),
            diff=d.get("diff"),
            schema_version=d.get("schema_version", COMPARISON_SCHEMA_VERSION),
        )
