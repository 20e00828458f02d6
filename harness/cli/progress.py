"""Progress of a long run: a live bar on a terminal, timestamped plain lines in a CI log."""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import Any


class ProgressDisplay:
    """Receives the runner's progress; ``live`` draws a rich progress bar above the lines."""

    def __init__(self, total: int, *, live: bool | None = None) -> None:
        self.total = total
        self.live = sys.stderr.isatty() if live is None else live
        self.start = time.monotonic()
        self._progress: Any = None
        self._task: Any = None

    def __enter__(self) -> ProgressDisplay:
        if self.live:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self._progress.__enter__()
            self._task = self._progress.add_task("starting", total=self.total)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._progress is not None:
            self._progress.__exit__(exc_type, exc, tb)

    def item(self, index: int, total: int, name: str) -> None:
        """A case starts (``index`` counts from 1)."""
        if self._progress is not None:
            self._progress.update(self._task, completed=index - 1, description=name)
        else:
            self.line(f"[{index}/{total}] {name}")

    def line(self, text: str) -> None:
        """One event, such as a finished attempt."""
        stamp = f"[{time.monotonic() - self.start:7.1f}s]"
        if self._progress is not None:
            self._progress.console.print(f"{stamp} {text}", markup=False, highlight=False)
        else:
            print(f"{stamp} {text}", file=sys.stderr, flush=True)
