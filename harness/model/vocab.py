"""The one source of every vocabulary: statuses, kinds, ops and their meaning, the failing set,
display names and how numbers are spelled in JSON and in reports.

Everything else imports these names; nothing else defines a status or an op.
"""

from __future__ import annotations

import json
import math
import operator
from collections.abc import Callable
from typing import Any, Literal

Status = Literal[
    "passed", "failed", "error", "timeout", "crashed", "skipped", "budget_declined", "flaky"
]
STATUSES: tuple[str, ...] = (
    "passed",
    "failed",
    "error",
    "timeout",
    "crashed",
    "skipped",
    "budget_declined",
    "flaky",
)
# Attempt statuses that count as the code under test not passing.
FAILING: frozenset[str] = frozenset({"failed", "error", "timeout", "crashed"})
# Worst first: the status a case takes from its worst measured attempt.
SEVERITY: tuple[Status, ...] = ("crashed", "timeout", "error", "failed")

Policy = Literal["fail", "warn"]
POLICIES: tuple[str, ...] = ("fail", "warn")

Kind = Literal["loader", "quant", "pipeline", "import", "server"]
KINDS: tuple[str, ...] = ("loader", "quant", "pipeline", "import", "server")

FRAME_MODES: tuple[str, ...] = ("first-mid-last", "all")
FrameSpec = str | tuple[int, ...]

# The two sides of a comparison; a plain run is the head of nothing, and is called "head".
Side = Literal["base", "head"]
SIDES: tuple[str, ...] = ("base", "head")

_OPS: dict[str, Callable[[Any, Any], bool]] = {
    ">=": operator.ge,
    ">": operator.gt,
    "<=": operator.le,
    "<": operator.lt,
    "==": operator.eq,
    "!=": operator.ne,
}
OPS: tuple[str, ...] = tuple(_OPS)
# Ops that order numbers: their threshold must be a number, not a string or a boolean.
ORDERING_OPS: frozenset[str] = frozenset({">=", ">", "<=", "<"})


# Platform names. harness.platforms.REGISTRY has one probe per name (a test holds the two
# equal); case files and runner profiles may name only these.
PLATFORMS: tuple[str, ...] = ("cpu", "cuda", "hip", "npu", "xpu", "mps")

# Metric names a declared check may use: the quality metrics of harness.metrics (a test holds
# them equal to metrics.names()), the case-level ones harness.checks runs over all attempts,
# and ``note.<key>`` for values a target reported with probe.note.
QUALITY_METRICS: tuple[str, ...] = (
    "ssim", "psnr", "mae", "max_abs", "clip", "audio_snr", "audio_mad", "audio_lsd",
    "audio_lag_ms",
)  # fmt: skip
CASE_LEVEL_METRICS: tuple[str, ...] = ("identical_outputs",)
NOTE_PREFIX = "note."

# Upper bounds of a case's counts and time limit: a typo such as a 64-bit repeats or a
# timeout of 1e10 s is an input error at load time, not an endless or crashing run.
MAX_REPEATS = 1000
MAX_WARMUP = 100
MAX_RETRIES = 10
MAX_TIMEOUT_S = 24 * 3600.0


def compare(value: Any, op: str, threshold: Any) -> bool:
    """``value op threshold``; NaN never passes an ordering check, a type mismatch never passes."""
    if isinstance(value, float) and math.isnan(value) and op != "!=":
        return False
    try:
        return bool(_OPS[op](value, threshold))
    except TypeError:
        return False


def display_name(kind: str, case_id: str, platform: str) -> str:
    """``<kind>/<id>[<platform>]``, the name used by pytest items and every report."""
    return f"{kind}/{case_id}[{platform}]"


def json_number(x: Any) -> Any:
    """JSON has no infinity or NaN: write them as the strings "inf", "-inf", "nan"."""
    if x is None or isinstance(x, bool) or not isinstance(x, float):
        return x
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def json_safe(x: Any) -> Any:
    """A copy of a JSON-like document with every non-finite float written as a string."""
    if isinstance(x, float):
        return json_number(x)
    if isinstance(x, dict):
        return {k: json_safe(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [json_safe(v) for v in x]
    return x


def json_dumps(doc: Any, **kw: Any) -> str:
    """``json.dumps(json_safe(doc), allow_nan=False, default=str)``, the same text, without
    copying the document when it holds no non-finite float (the common case: a per-attempt
    record or request is written once an attempt)."""
    try:
        return json.dumps(doc, allow_nan=False, default=str, **kw)
    except ValueError:  # a NaN or an infinity somewhere: spell it as a string
        return json.dumps(json_safe(doc), allow_nan=False, default=str, **kw)


def number_from_json(x: Any) -> Any:
    """Inverse of :func:`json_number`."""
    if isinstance(x, str) and x in ("inf", "-inf", "nan"):
        return float(x)
    return x


def fmt_number(v: Any) -> str:
    """A number as a report shows it: 6 significant digits, inf/nan spelled out, None as -."""
    if isinstance(v, bool) or v is None:
        return "-" if v is None else str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return f"{v:.6g}"
    return str(v)
