"""Validate a ``report.json`` document against the JSON Schema published in the package.

Example::

    validate_report(json.loads(Path("report.json").read_text()))  # raises ReportFormatError
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping
from importlib import resources
from typing import Any

from harness.errors import ReportFormatError
from harness.model import SCHEMA_VERSION

__all__ = [
    "load_comparison_schema",
    "load_report_schema",
    "validate_comparison",
    "validate_report",
]

_SCHEMA_FILE = "report.schema.json"


@functools.cache
def load_report_schema() -> dict[str, Any]:
    """The report JSON Schema (draft 2020-12), read from ``harness/report/schemas/``."""
    text = (resources.files("harness.report") / "schemas" / _SCHEMA_FILE).read_text("utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


@functools.cache
def _validator() -> Any:
    import jsonschema

    return jsonschema.Draft202012Validator(load_report_schema())


def validate_report(doc: Any) -> None:
    """Raise :class:`ReportFormatError` naming the JSON path of the first problem in ``doc``.

    A document written by another format version gets a message saying so, rather than a
    list of every field that moved.
    """
    if not isinstance(doc, Mapping):
        raise ReportFormatError(f"report: $: expected a JSON object, got {type(doc).__name__}")
    version = doc.get("schema_version")
    if version is not None and version != SCHEMA_VERSION:
        raise ReportFormatError(
            f"report: $.schema_version: unsupported schema_version {version!r}; "
            f"this harness reads version {SCHEMA_VERSION}"
        )
    from jsonschema.exceptions import best_match

    error = best_match(_validator().iter_errors(doc))
    if error is None:
        return
    path = list(error.absolute_path)
    # Point at the offending key itself, not at the object that holds it.
    if error.validator == "required" and isinstance(error.instance, Mapping):
        missing = [k for k in error.validator_value if k not in error.instance]
        if missing:
            path.append(missing[0])
            raise ReportFormatError(f"report: {_json_path(path)}: required key is missing")
    if error.validator == "additionalProperties" and isinstance(error.instance, Mapping):
        known = error.schema.get("properties", {})
        extra = sorted(str(k) for k in error.instance if k not in known)
        if extra:
            path.append(extra[0])
            raise ReportFormatError(
                f"report: {_json_path(path)}: unknown key (allowed: {', '.join(sorted(known))})"
            )
    raise ReportFormatError(f"report: {_json_path(path)}: {error.message}")


def _json_path(parts: Iterable[Any]) -> str:
    out = "$"
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        elif isinstance(p, str) and p.isidentifier():
            out += f".{p}"
        else:
            out += f"[{json.dumps(str(p))}]"
    return out


_COMPARISON_SCHEMA_FILE = "comparison.schema.json"


@functools.cache
def load_comparison_schema() -> dict[str, Any]:
    """The comparison JSON Schema (draft 2020-12), read from ``harness/report/schemas/``."""
    text = (resources.files("harness.report") / "schemas" / _COMPARISON_SCHEMA_FILE).read_text(
        "utf-8"
    )
    schema: dict[str, Any] = json.loads(text)
    return schema


def validate_comparison(doc: Any) -> None:
    """Raise :class:`ReportFormatError` naming the JSON path of the first problem in ``doc``."""
    import jsonschema
    from jsonschema.exceptions import best_match

    validator = jsonschema.Draft202012Validator(load_comparison_schema())
    error = best_match(validator.iter_errors(doc))
    if error is not None:
        raise ReportFormatError(f"comparison: {_json_path(error.absolute_path)}: {error.message}")
