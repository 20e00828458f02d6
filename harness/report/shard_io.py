"""Reading the reports of a sharded run, fast, without checking less.

Every shard report carries the whole plan (5,000 entries in a fleet of 100 shards of 50
cases: more than half of each file), and checking and decoding it a hundred times was most of
a merge. So the first report's plan is decoded, schema-checked and parsed in full; in each
later report, the plan written with the same bytes is found in the text and replaced, before
decoding, by a marker that no file can hold (a random token of this process). A report whose
marker lands in its ``shard.plan`` is checked with an empty plan (its plan equals one checked
already) and given the plan parsed once; any other report (another plan, other spelling, the
marker somewhere else, bad JSON) is decoded from its own text and checked in full, as
:func:`harness.report.io.read_report` would.

Example::

    reports = read_shard_reports([Path("ci/shard-1"), Path("ci/shard-2")])
"""

from __future__ import annotations

import gc
import json
import secrets
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness.errors import ReportFormatError
from harness.model import SCHEMA_VERSION, PlannedCase, RunReport
from harness.model.vocab import json_dumps
from harness.report.schema import read_document, validate_report

__all__ = ["read_shard_reports"]

try:
    import orjson
except ImportError:  # an optional speed-up: json.loads reads the same documents
    orjson = None  # type: ignore[assignment]

_MARK = f"harness-plan-seen-{secrets.token_hex(16)}"
_MARK_JSON = json.dumps(_MARK)
_BLANK = " \t\r\n"


@dataclass(frozen=True)
class _Plan:
    """A plan checked and parsed already: as decoded, as the writer spells it, as records."""

    doc: list[Any]
    text: str
    records: tuple[PlannedCase, ...]


def _elide_plan(text: str, plan: str) -> str | None:
    """``text`` with the first ``"plan": <plan>`` member's value replaced by the marker, or
    None when no member has that value. A ``"plan"`` with unescaped quotes is a whole string,
    and one followed by a colon a key; ``startswith`` at the value compares the bytes."""
    start = 0
    while (i := text.find('"plan"', start)) >= 0:
        start = j = i + 6
        while j < len(text) and text[j] in _BLANK:
            j += 1
        if j == len(text) or text[j] != ":":
            continue
        j += 1
        while j < len(text) and text[j] in _BLANK:
            j += 1
        if text.startswith(plan, j):
            return text[:j] + _MARK_JSON + text[j + len(plan) :]
    return None


def _loads(text: str) -> Any:
    """``json.loads(text)``, by orjson where it takes the text (twice as fast); json.loads
    reads what orjson refuses (a NaN literal, an integer past 64 bits) and names the place of
    bad JSON, so both read the same documents."""
    if orjson is not None:
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            pass
    return json.loads(text)


def _decode(text: str, seen: _Plan | None) -> tuple[Any, bool]:
    """The document of ``text``, and whether its ``shard.plan`` was left out (emptied) as
    equal to ``seen``'s."""
    if seen is not None:
        elided = _elide_plan(text, seen.text)
        if elided is not None:
            try:
                doc = _loads(elided)
            except ValueError:
                doc = None  # bad JSON: decoded again below, for the error's true position
            shard = doc.get("shard") if isinstance(doc, dict) else None
            if isinstance(shard, dict) and shard.get("plan") == _MARK:
                shard["plan"] = []
                return doc, True
    doc = _loads(text)
    shard = doc.get("shard") if isinstance(doc, dict) else None
    if seen is not None and isinstance(shard, dict) and shard.get("plan") == seen.doc:
        shard["plan"] = []  # spelled otherwise (indented, other key order), equal once decoded
        return doc, True
    return doc, False


@contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """The cyclic garbage collector paused: decoded JSON and the records built from it hold
    no reference cycles, so its passes over the growing set of live objects (millions in a
    fleet's reports) found nothing and cost 15 % of the reading."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def read_shard_reports(paths: Sequence[Path]) -> list[RunReport]:
    """The shard reports at ``paths`` (files or run folders), as ``read_report`` reads them,
    each distinct plan checked and parsed once (see the module's docstring). Raises
    :class:`ReportFormatError` naming the file and the key of the first problem."""
    with _no_cycle_collection():
        return _read(paths)


def _read(paths: Sequence[Path]) -> list[RunReport]:
    out: list[RunReport] = []
    seen: _Plan | None = None
    for path in paths:
        elided = False

        def decode(text: str, seen: _Plan | None = seen) -> Any:
            nonlocal elided
            doc, elided = _decode(text, seen)
            return doc

        doc = read_document(
            path,
            file_name="report.json",
            noun="report",
            version=SCHEMA_VERSION,
            redo="re-run the cases with this harness version",
            validate=validate_report,
            decode=decode,
        )
        try:
            report = RunReport.from_json(doc)
        except (KeyError, TypeError, ValueError) as exc:
            raise ReportFormatError(f"{path}: malformed report: missing or bad {exc}") from exc
        info = report.shard
        if elided and seen is not None and info is not None:
            report = replace(report, shard=replace(info, plan=seen.records))
        elif info is not None and info.plan:
            plan = doc["shard"]["plan"]
            seen = _Plan(plan, json_dumps(plan, indent=None), info.plan)
        out.append(report)
    return out
