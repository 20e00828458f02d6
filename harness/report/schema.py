"""Validate a ``report.json`` document against the JSON Schema published in the package.

Example::

    validate_report(json.loads(Path("report.json").read_text()))  # raises ReportFormatError
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from harness.errors import ReportFormatError
from harness.model import SCHEMA_VERSION

__all__ = [
    "load_comparison_schema",
    "load_report_schema",
    "read_document",
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


@functools.cache
def _fast_validator() -> Callable[[Any], Any] | None:
    """The report schema compiled to Python by fastjsonschema (~20x faster than jsonschema on
    a shard of 50 pipeline cases: what keeps a merge of 100 shards in seconds), or None
    without it. It checks valid documents only: a document it refuses is judged again by
    jsonschema, which is the authority and names the problem. The schema uses no keyword
    whose meaning differs between draft 2020-12 and draft 7 (no ``$ref`` with siblings, no
    ``prefixItems``), so it is compiled as draft 7, the newest fastjsonschema knows."""
    try:
        import fastjsonschema
    except ImportError:
        return None
    schema = dict(load_report_schema(), **{"$schema": "http://json-schema.org/draft-07/schema#"})
    compiled: Callable[[Any], Any] = fastjsonschema.compile(_type_unions(schema))
    return compiled


def _type_unions(node: Any) -> Any:
    """``{"anyOf": [{"type": "string"}, {"type": "null"}]}`` as ``{"type": ["string",
    "null"]}``: the same meaning, but fastjsonschema's code for an anyOf raises and catches an
    exception (with its message formatted) for every branch that does not match, which was
    most of the time it spent on a report (a null output or reason in every check)."""
    if isinstance(node, list):
        return [_type_unions(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: _type_unions(v) for k, v in node.items()}
    branches = out.get("anyOf")
    if (
        isinstance(branches, list)
        and branches
        and all(isinstance(b, dict) and set(b) == {"type"} for b in branches)
        and "type" not in out
    ):
        del out["anyOf"]
        out["type"] = [
            t for b in branches for t in ([b["type"]] if isinstance(b["type"], str) else b["type"])
        ]
    return out


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
    fast = _fast_validator()
    if fast is not None:
        try:
            fast(doc)
            return
        except Exception:  # JsonSchemaValueException: jsonschema below says where and why
            pass
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


_JSON_TYPES = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}


def read_document(
    path: Path,
    *,
    file_name: str,
    noun: str,
    version: int,
    redo: str,
    validate: Callable[[Any], None],
) -> dict[str, Any]:
    """The JSON object of ``path`` (or of ``path / file_name`` for a folder), at schema
    ``version`` and valid against its schema (``validate``); every way it can fail is a
    :class:`ReportFormatError` naming the file. ``noun``: what it is ("report"), ``redo``: what
    to do about an unsupported version."""
    if path.is_dir():
        path = path / file_name
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ReportFormatError(f"{path}: no such {noun}") from exc
    except UnicodeDecodeError as exc:
        raise ReportFormatError(f"{path}: not a {noun}: not UTF-8 text ({exc.reason})") from exc
    except OSError as exc:
        raise ReportFormatError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except json.JSONDecodeError as exc:
        raise ReportFormatError(f"{path}: not valid JSON: {exc}") from exc
    if not isinstance(doc, dict):
        kind = _JSON_TYPES.get(type(doc), "number")
        raise ReportFormatError(f"{path}: not a {noun}: expected a JSON object, got {kind}")
    got = doc.get("schema_version")
    if got != version:
        raise ReportFormatError(
            f"{path}: schema_version {got!r} is not supported (expected {version}); {redo}"
        )
    # Every key checked against the published schema: an unknown status or field is an error
    # here, not a rendering that silently drops it.
    try:
        validate(doc)
    except ReportFormatError as exc:
        raise ReportFormatError(f"{path}: {str(exc).removeprefix(f'{noun}: ')}") from None
    return doc
