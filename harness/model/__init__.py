"""Floor 1: the plain, frozen records that flow between the stages, and every vocabulary.

Each record converts to and from the JSON of ``report.json`` (``to_json`` / ``from_json``);
the JSON Schema in ``harness/report/schemas/report.schema.json`` describes the same shape.
"""

from __future__ import annotations

from harness.model.case import Case, CheckSpec, case_from_json, case_to_json
from harness.model.records import (
    SCHEMA_VERSION,
    Attempt,
    CaseResult,
    CheckResult,
    ErrorInfo,
    LoadError,
    RunReport,
    error_signature,
    exit_code,
    stage_samples,
)
from harness.model.vocab import (
    FAILING,
    FRAME_MODES,
    KINDS,
    OPS,
    ORDERING_OPS,
    POLICIES,
    SEVERITY,
    SIDES,
    STATUSES,
    FrameSpec,
    Kind,
    Policy,
    Side,
    Status,
    compare,
    display_name,
    fmt_number,
    json_number,
    json_safe,
    number_from_json,
)

__all__ = [
    "FAILING",
    "FRAME_MODES",
    "KINDS",
    "OPS",
    "ORDERING_OPS",
    "POLICIES",
    "SCHEMA_VERSION",
    "SEVERITY",
    "SIDES",
    "STATUSES",
    "Attempt",
    "Case",
    "CaseResult",
    "CheckResult",
    "CheckSpec",
    "ErrorInfo",
    "FrameSpec",
    "Kind",
    "LoadError",
    "Policy",
    "RunReport",
    "Side",
    "Status",
    "case_from_json",
    "case_to_json",
    "compare",
    "display_name",
    "error_signature",
    "exit_code",
    "fmt_number",
    "json_number",
    "json_safe",
    "number_from_json",
    "stage_samples",
]
