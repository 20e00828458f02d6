"""What a case that starts processes of its own (a server case, a multi-rank case) raises when
its attempt does not pass: light to import, so that a worker loads the modules that run such
cases only when it runs one."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.model.hang import HangDiagnosis
    from harness.model.ranks import RanksRecord


class CaseProcessError(Exception):
    """``status`` is the attempt's status, ``kind`` the error type recorded (``ServerExited``,
    ``RanksTimeout``...), ``diagnosis`` the hang diagnosis taken before the kill on a timeout,
    ``record`` a multi-rank attempt's per-rank record so far."""

    def __init__(self, status: str, kind: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.diagnosis: HangDiagnosis | None = None
        self.record: RanksRecord | None = None


class ServerError(CaseProcessError):
    """A server case's attempt did not pass (``ServerExited``, ``ServerNotReady``,
    ``ServerRequestFailed``...)."""


class RanksError(CaseProcessError):
    """A multi-rank attempt did not pass (``RanksTimeout``, ``RanksLeftProcesses``...)."""


__all__ = ["CaseProcessError", "RanksError", "ServerError"]
