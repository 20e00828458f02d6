"""The write-ahead journal of a run: every finished attempt appended to ``attempts.jsonl`` and
flushed before anything else happens, so a crash of the manager itself still leaves a record of
all finished work."""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO

from harness.errors import ReportFormatError
from harness.model import Attempt, json_dumps


class JournalWriter:
    """Appends attempts, one JSON line each, flushed at once."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: IO[str] = open(path, "a", encoding="utf-8")  # noqa: SIM115 - see close()

    def append(self, attempt: Attempt) -> None:
        line = json_dumps(attempt.to_json())
        self._file.write(line + "\n")
        self._file.flush()

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()


def read_journal(path: Path) -> list[Attempt]:
    """Every attempt in a journal. A torn last line (the manager died mid-write) is ignored;
    a bad line anywhere else is an error naming the file and the line."""
    attempts: list[Attempt] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            attempts.append(Attempt.from_json(json.loads(line)))
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            if number == len(lines):
                break
            raise ReportFormatError(f"{path}:{number}: not an attempt record: {exc}") from exc
    return attempts
