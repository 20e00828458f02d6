"""Where each case's table starts in its file's text (for annotations that point at it)."""

from __future__ import annotations

import re

# A table header line (``[x]`` or ``[[x]]``, comment allowed) and a case's ``id = "..."`` line.
_HEADER = re.compile(r"\s*(\[\[?)\s*([A-Za-z0-9_.\-\"' ]*?)\s*\]\]?\s*(#.*)?$")
_ID_LINE = re.compile(r"""\s*(?:id|"id"|'id')\s*=\s*(?:"([^"\\]*)"|'([^']*)')""")


def case_lines(text: str) -> dict[str, int]:
    """Case id -> 1-based line of its table in a case file's ``text``: the ``[[case]]`` header
    of an array-of-tables file, or the ``id = ...`` line of a one-case file (tomllib keeps no
    positions, so the text is scanned). Only an ``id`` directly in a case table counts, not one
    in a sub-table such as ``[case.params]``; a file that does not parse may give a partial map.
    """
    lines: dict[str, int] = {}
    table: str | None = None  # None: top level
    header_line = 0
    for number, line in enumerate(text.splitlines(), start=1):
        header = _HEADER.match(line)
        if header:
            table = header.group(2) if header.group(1) == "[" else f"[{header.group(2)}]"
            header_line = number
            continue
        found = _ID_LINE.match(line)
        if found is None:
            continue
        case_id = found.group(1) if found.group(1) is not None else found.group(2)
        if table is None:
            lines.setdefault(case_id, number)
        elif table == "[case]":
            lines.setdefault(case_id, header_line)
    return lines
