"""A hang diagnosis: what every process of a hung server was doing when its time ran out.

Captured by :mod:`harness.worker.hang_diagnosis` on a readiness timeout or a request that
outlived its timeout, before the server is killed, and recorded on the attempt
(``Attempt.hang``, written to report.json only when set). Per process: its rank, CPU use over
the last second, whether the log it writes (its stdout) was still growing and its last line
with that line's age, and its stacks with the method that got them (``py-spy --native``,
``py-spy``, ``faulthandler (SIGUSR1)`` or ``not available``). Beside them, the device
utilisation the platform's tool reported, or "not available here".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# The stack methods, best first; a diagnosis names the one that worked for each process.
STACK_METHODS: tuple[str, ...] = (
    "py-spy --native",
    "py-spy",
    "faulthandler (SIGUSR1)",
    "not available",
)


@dataclass(frozen=True)
class ProcessDiagnosis:
    """One process of the hung server's tree."""

    pid: int
    ppid: int
    command: str
    rank: int | None  # None: no RANK/LOCAL_RANK in its environment or --rank in its cmdline
    rank_source: str  # "RANK in its environment", "the started process", "" ...
    cpu_percent: float | None  # of one core, over the sampling window; None if unreadable
    log: str  # the file its stdout goes to ("" when not a file)
    log_growing: bool | None  # the log grew during the sampling window; None without a log
    log_grew_bytes: int
    last_line: str
    last_line_age_s: float | None  # seconds since the log was last written (its mtime)
    stack_method: str  # one of STACK_METHODS
    stack: str  # at most the dump cap
    stack_notes: str = ""  # why better methods were not used ("py-spy --native: ...")
    where: str = ""  # the innermost Python frame of the first thread dumped: "fn (file.py:12)"

    def to_json(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "ppid": self.ppid,
            "command": self.command,
            "rank": self.rank,
            "rank_source": self.rank_source,
            "cpu_percent": self.cpu_percent,
            "log": self.log,
            "log_growing": self.log_growing,
            "log_grew_bytes": self.log_grew_bytes,
            "last_line": self.last_line,
            "last_line_age_s": self.last_line_age_s,
            "stack_method": self.stack_method,
            "stack": self.stack,
            "stack_notes": self.stack_notes,
            "where": self.where,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ProcessDiagnosis:
        return cls(
            pid=int(d["pid"]),
            ppid=int(d.get("ppid", 0)),
            command=str(d.get("command", "")),
            rank=d.get("rank"),
            rank_source=str(d.get("rank_source", "")),
            cpu_percent=d.get("cpu_percent"),
            log=str(d.get("log", "")),
            log_growing=d.get("log_growing"),
            log_grew_bytes=int(d.get("log_grew_bytes", 0)),
            last_line=str(d.get("last_line", "")),
            last_line_age_s=d.get("last_line_age_s"),
            stack_method=str(d.get("stack_method", "not available")),
            stack=str(d.get("stack", "")),
            stack_notes=str(d.get("stack_notes", "")),
            where=str(d.get("where", "")),
        )


@dataclass(frozen=True)
class HangDiagnosis:
    """Every process of a hung server, captured under one deadline before the kill."""

    trigger: str  # "readiness timeout", "request #0 timeout"
    captured_at: str  # ISO time the capture started
    seconds: float  # how long the capture took
    deadline_s: float  # the shared deadline it ran under
    window_s: float  # the CPU / log-growth sampling window
    processes: tuple[ProcessDiagnosis, ...] = ()
    device: str = "not available here"  # the platform tool's report
    device_tool: str = ""  # "nvidia-smi", "rocm-smi", "npu-smi" or ""
    unfinished: str = ""  # what the deadline cut short ("" when nothing)

    @property
    def logs_growing(self) -> bool:
        """Some process's log was still growing at the deadline (the server was making
        progress, however slowly): the one case a readiness timeout may be retried."""
        return any(p.log_growing for p in self.processes)

    def growth_text(self) -> str:
        """Which logs grew, in one phrase (for the retry decision's record)."""
        grew = {p.log: p.log_grew_bytes for p in self.processes if p.log_growing}
        if not grew:
            return f"no process's log grew in the last {self.window_s:.1f} s before the kill"
        parts = ", ".join(f"{log} +{n} bytes" for log, n in sorted(grew.items()))
        return f"logs still growing in the last {self.window_s:.1f} s: {parts}"

    def to_json(self) -> dict[str, Any]:
        return {
            "trigger": self.trigger,
            "captured_at": self.captured_at,
            "seconds": self.seconds,
            "deadline_s": self.deadline_s,
            "window_s": self.window_s,
            "processes": [p.to_json() for p in self.processes],
            "device": self.device,
            "device_tool": self.device_tool,
            "unfinished": self.unfinished,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> HangDiagnosis:
        return cls(
            trigger=str(d["trigger"]),
            captured_at=str(d.get("captured_at", "")),
            seconds=float(d.get("seconds", 0.0)),
            deadline_s=float(d.get("deadline_s", 0.0)),
            window_s=float(d.get("window_s", 0.0)),
            processes=tuple(ProcessDiagnosis.from_json(p) for p in d.get("processes", [])),
            device=str(d.get("device", "not available here")),
            device_tool=str(d.get("device_tool", "")),
            unfinished=str(d.get("unfinished", "")),
        )
