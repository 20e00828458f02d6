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
def _fast_validator() -> Callable[[Any], bool] | None:
    """The report schema compiled once by jsonschema-rs (Rust, draft 2020-12 as written), as
    a yes/no check, or None without it. ~20x faster than fastjsonschema's generated Python and
    ~1000x faster than jsonschema on a shard of 50 pipeline cases: what keeps a merge of 100
    shards within seconds. It is never the last word on a refusal: a document it refuses (or
    cannot take: an integer past 64 bits) is judged again by jsonschema, which is the
    authority and names the problem. The schema has no ``format`` keyword, so neither
    library's format checks come into it."""
    try:
        import jsonschema_rs
    except ImportError:
        return None
    compiled = jsonschema_rs.Draft202012Validator(load_report_schema())

    def is_valid(doc: Any) -> bool:
        try:
            return bool(compiled.is_valid(doc))
        except Exception:  # a value it cannot convert (ValueError, OverflowError, ...)
            return False

    return is_valid


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
    if fast is not None and fast(doc):
        return
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
    decode: Callable[[str], Any] = json.loads,
) -> dict[str, Any]:
    """The JSON object of ``path`` (or of ``path / file_name`` for a folder), at schema
    ``version`` and valid against its schema (``validate``); every way it can fail is a
    :class:`ReportFormatError` naming the file. ``noun``: what it is ("report"), ``redo``: what
    to do about an unsupported version; ``decode``: the file's text to its document (raising
    :class:`json.JSONDecodeError` on bad JSON)."""
    if path.is_dir():
        path = path / file_name
    try:
        doc = decode(path.read_text(encoding="utf-8"))
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
