"""Render a :class:`~harness.model.RunReport` as JUnit XML (``junit.xml``) for CI dashboards.

One ``<testsuite name="harness">`` with one ``<testcase>`` per case result. Reruns follow the
maven surefire format that Jenkins, GitLab and most JUnit readers understand:

- a flaky case passes, carrying each failed attempt as ``<flakyFailure>`` (check failure) or
  ``<flakyError>`` (error, timeout, crash) with ``message``, ``type`` and a ``<stackTrace>``;
- a case whose retries all failed carries its ``<failure>`` / ``<error>`` and the earlier failed
  attempts as ``<rerunFailure>`` / ``<rerunError>``.

A failed case's text is a readable table of its failed checks (metric, output, frame, obtained,
threshold, settings), not a traceback, so a CI log line says what to look at.

Example::

    write_junit(RunReport.from_json(json.loads(Path("report.json").read_text())),
                Path("reports/run/junit.xml"))
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.fsio import write_atomic
from harness.model import (
    FAILING,
    Attempt,
    CaseResult,
    CheckResult,
    MissingCase,
    RunReport,
    fmt_number,
    stage_medians,
)
from harness.model.layers import case_layers
from harness.report.text import contention_figures, explain_checks

__all__ = ["write_junit", "xml_safe"]

# Characters XML 1.0 forbids even as character references: C0 controls other than tab, LF,
# CR; lone surrogates (which would also break UTF-8 encoding); U+FFFE and U+FFFF.
_INVALID_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")

_ERROR_STATUSES = frozenset({"error", "timeout", "crashed"})
_FAILURE_STATUSES = frozenset({"failed", "budget_declined"})
_MESSAGE_MAX = 500  # attribute values show on one line in most UIs; the full text is the body


def xml_safe(text: object) -> str:
    """``str(text)`` without the characters XML 1.0 cannot carry."""
    text = str(text)
    # printable text has none of them (they are controls, surrogates or noncharacters): the
    # common case, 20x cheaper than the substitution
    return text if text.isprintable() else _INVALID_XML.sub("", text)


def write_junit(report: RunReport, path: Path) -> None:
    """Write ``report`` as JUnit XML to ``path`` atomically (temp file, then ``os.replace``)."""
    root = _suite(report)
    ET.indent(root)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)

    def write(tmp: Path) -> None:
        ET.ElementTree(root).write(tmp, encoding="utf-8", xml_declaration=True)

    write_atomic(path, write)


# --- document ------------------------------------------------------------------------------


def _suite(report: RunReport) -> ET.Element:
    counts = report.counts()
    times = [_case_time(c) for c in report.cases]
    suite = ET.Element(
        "testsuite",
        _attrs(
            name="harness",
            tests=len(report.cases) + len(report.missing),
            failures=sum(counts[s] for s in _FAILURE_STATUSES),
            # A planned case with no result (missing) is an error, never a pass or a skip.
            errors=sum(counts[s] for s in _ERROR_STATUSES) + len(report.missing),
            skipped=counts["skipped"],
            time=_secs(sum(times)),
            timestamp=report.started_at,
        ),
    )
    props: dict[str, Any] = {
        "run_id": report.run_id,
        "runner": report.runner,
        "schema_version": report.schema_version,
        "interrupted": report.interrupted,
    }
    git = report.env.get("git")
    if isinstance(git, Mapping):
        props.update({"git.sha": git.get("sha"), "git.dirty": git.get("dirty")})
    _properties(suite, props)
    for case, secs in zip(report.cases, times, strict=True):
        suite.append(_testcase(case, secs))
    for missing in report.missing:
        suite.append(_missing_testcase(missing))
    return suite


def _missing_testcase(m: MissingCase) -> ET.Element:
    """A planned case that has no result: an ``<error type="missing">`` saying why."""
    tc = ET.Element("testcase", _attrs(classname=m.kind, name=m.name, time=_secs(0.0)))
    _properties(tc, {"platform": m.platform, "status": "missing", "shard": m.shard})
    _sub(tc, "error", message=f"missing: {m.reason}", type="missing").text = xml_safe(m.reason)
    return tc


def _testcase(case: CaseResult, secs: float) -> ET.Element:
    tc = ET.Element("testcase", _attrs(classname=case.kind, name=case.name, time=_secs(secs)))
    props: dict[str, Any] = {
        "seed": case.seed,
        "repeats": case.repeats,
        "platform": case.platform,
        "simulated": case.simulated,
        "status": case.status,
        "warnings": len(case.warnings),
        "contention": len(case.contention),
    }
    layers = case_layers(case.attempts)
    if layers is not None:
        props["reference_layers"] = layers.status
        props["reference_layers.first_departure"] = layers.first_departure or ""
    if case.identity and case.identity.get("arch"):
        props["arch"] = case.identity["arch"]
    on_fail = case.policy.get("latency.on_fail")
    if on_fail:
        props["policy.latency.on_fail"] = f"{on_fail.get('value')} ({on_fail.get('rule')})"
    # Microsecond resolution: a sub-millisecond stage must not read as 0.000.
    props.update({f"stage.{k}": f"{v:.6f}" for k, v in stage_medians(case.attempts).items()})
    _properties(tc, props)

    failing = [a for a in case.attempts if a.status in FAILING]
    if case.status == "skipped":
        _sub(tc, "skipped", message=case.reason or "skipped (no reason given)")
    elif case.status == "flaky":
        for a in failing:
            tag = "flakyFailure" if a.status == "failed" else "flakyError"
            _rerun(tc, tag, a)
    elif case.status in _FAILURE_STATUSES or case.status in _ERROR_STATUSES:
        tag = "failure" if case.status in _FAILURE_STATUSES else "error"
        message, type_, body = _case_problem(case, failing[-1] if failing else None)
        layers = case_layers(case.attempts)
        if layers is not None:  # where the run first left its layered reference
            message = f"{message}; reference layers: {layers.summary}"
            body = f"{body}\n\nreference layers: {layers.summary}"
        el = _sub(tc, tag, message=message, type=type_)
        el.text = xml_safe(body)
        # The last failing attempt is the verdict; the earlier ones are its reruns.
        for a in failing[:-1]:
            _rerun(tc, "rerunFailure" if a.status == "failed" else "rerunError", a)

    notes = _notes(case)
    if notes:
        ET.SubElement(tc, "system-out").text = xml_safe(notes)
    return tc


def _case_problem(case: CaseResult, last: Attempt | None) -> tuple[str, str, str]:
    """(message, type, body) of a failed / errored case."""
    if case.status == "budget_declined":
        why = case.reason or "the run's time budget could not fit this case"
        return why, "budget_declined", why
    checks = [c for c in case.checks if c.blocking]
    if not checks and last is not None:
        checks = [c for c in last.checks if c.blocking]
    if last is not None and last.error is not None and (case.status != "failed" or not checks):
        return _error_text(last, case.status)
    if checks:
        return _checks_summary(checks), "CheckFailed", explain_checks(checks)
    why = case.reason or f"case {case.status} without a recorded error or failed check"
    return why, case.status, why


def _rerun(parent: ET.Element, tag: str, a: Attempt) -> None:
    checks = [c for c in a.checks if c.blocking]
    if a.error is not None or not checks:
        message, type_, body = _error_text(a, a.status)
    else:
        message, type_, body = _checks_summary(checks), "CheckFailed", explain_checks(checks)
    el = _sub(parent, tag, message=f"{_attempt_label(a)}: {message}", type=type_)
    ET.SubElement(el, "stackTrace").text = xml_safe(body)


def _error_text(a: Attempt, status: str) -> tuple[str, str, str]:
    if a.error is None:
        msg = f"attempt {status} without a recorded error"
        return msg, status, msg
    message = f"{a.error.type}: {a.error.message}"
    body = message + ("\n\n" + a.error.traceback if a.error.traceback else "")
    return message, a.error.type or status, body


def _attempt_label(a: Attempt) -> str:
    extra = ", warmup" if a.warmup else ""
    return f"attempt {a.index} (repeat {a.repeat}, retry {a.retry}{extra}) {a.status}"


# --- check tables --------------------------------------------------------------------------


def _checks_summary(checks: Sequence[CheckResult]) -> str:
    parts = [
        f"{c.name}: {c.metric} {fmt_number(c.value)} (want {c.op} {fmt_number(c.threshold)})"
        for c in checks
    ]
    head = f"{len(checks)} check{'s' if len(checks) != 1 else ''} failed: "
    return head + "; ".join(parts)


def _notes(case: CaseResult) -> str:
    """Warn-policy failures, budgets met only under contention and checks that could not
    run: reported, never silently passed."""
    lines: list[str] = []
    for c in case.checks:
        if c.contention:
            lines.append(f"contention: {c.name}: {contention_figures(c)}")
        elif c.passed is False and c.policy == "warn":
            rule = c.settings.get("on_fail_rule")
            lines.append(f"warning: {c.name}: {_obtained(c)}" + (f" [{rule}]" if rule else ""))
        elif c.passed is None:
            lines.append(f"not run: {c.name}: {c.reason or 'no reason given'}")
    if case.simulated:
        lines.append(f"platform {case.platform} was simulated")
    return "\n".join(lines)


# --- helpers -------------------------------------------------------------------------------


def _obtained(c: CheckResult) -> str:
    return f"{c.metric} {fmt_number(c.value)} (want {c.op} {fmt_number(c.threshold)})"


def _secs(v: float) -> str:
    return f"{v:.3f}"


def _case_time(case: CaseResult) -> float:
    return float(sum(a.duration_s for a in case.attempts))


def _attrs(**kw: Any) -> dict[str, str]:
    return {k: _attr(v) for k, v in kw.items()}


def _attr(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    text = xml_safe("" if v is None else v)
    return text if len(text) <= _MESSAGE_MAX else text[: _MESSAGE_MAX - 3] + "..."


def _sub(parent: ET.Element, tag: str, **attrs: Any) -> ET.Element:
    return ET.SubElement(parent, tag, _attrs(**attrs))


def _properties(parent: ET.Element, props: Mapping[str, Any]) -> None:
    el = ET.SubElement(parent, "properties")
    sub = ET.SubElement
    for name, value in props.items():
        sub(el, "property", {"name": _attr(name), "value": _attr(value)})
