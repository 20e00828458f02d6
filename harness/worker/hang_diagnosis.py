"""Diagnose a hung server before killing it: every process of its tree, under one deadline.

:func:`diagnose` runs only on a timeout (a server not ready in time, a request that outlived
its limit) and spends at most ``deadline_s`` (10 s) in all:

1. the processes: the server's process group and every descendant of the started process;
2. a sampling window (~1 s, at most a quarter of the deadline) over which each process's CPU
   use is read from ``/proc/PID/stat`` (utime + stime) and each log's growth from its size;
   a process's log is the regular file its stdout goes to (``/proc/PID/fd/1``). The platform's
   device tool (``nvidia-smi``, ``rocm-smi``, ``npu-smi``) runs meanwhile, when on PATH;
3. the stacks of every process, all at once: ``py-spy dump --native`` where py-spy is on PATH
   and permitted (within 60 % of the time left), else ``py-spy dump`` (Python frames only),
   else faulthandler through SIGUSR1, sent only to a process that catches SIGUSR1 (``SigCgt``
   in ``/proc/PID/status``: it registered ``faulthandler.register(signal.SIGUSR1)``; to any
   other one the signal would be fatal), its dump being what that process then wrote to its
   stderr file. Each dump is capped at ``cap`` bytes (1 MiB).

Which rank a process is comes from ``RANK`` (else ``LOCAL_RANK``) in ``/proc/PID/environ``,
else ``--rank N`` / ``--local-rank N`` in its command line, else the started process is rank 0
when no other process says it is. Linux only (it reads /proc): elsewhere it lists no process.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO

from harness.model.hang import HangDiagnosis, ProcessDiagnosis

DEADLINE_S = 10.0
WINDOW_S = 1.0
DUMP_CAP = 1 << 20
LAST_LINE_CHARS = 500
# The platform's device-utilisation tool and its arguments.
DEVICE_TOOLS: Mapping[str, tuple[str, ...]] = {
    "cuda": (
        "nvidia-smi",
        "--query-gpu=index,name,utilization.gpu,memory.used,memory.total",
        "--format=csv",
    ),
    "hip": ("rocm-smi", "--showuse", "--showmemuse"),
    "npu": ("npu-smi", "info"),
}
NOT_HERE = "not available here"
_RANK_ARG = re.compile(r"--(local[-_])?rank[= ](\d+)\b")
_FAULTHANDLER_WAIT_S = 1.0


@dataclass
class _Proc:
    pid: int
    ppid: int
    command: str
    log: str = ""
    stderr: str = ""
    ticks: int | None = None
    notes: list[str] = field(default_factory=list)
    method: str = "not available"
    stack: str = ""


def _stat(pid: int) -> list[bytes] | None:
    """``/proc/PID/stat`` from the state field on (the command name may hold spaces)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None


def cpu_ticks(pid: int) -> int | None:
    """The process's user + system CPU time in clock ticks, or None (ended, not Linux)."""
    fields = _stat(pid)
    if fields is None or len(fields) < 13:
        return None
    return int(fields[11]) + int(fields[12])


def process_tree(root: int) -> dict[int, tuple[int, str]]:
    """pid -> (ppid, command line) of the live processes in process group ``root`` and of the
    descendants of ``root`` (a rank that left the group is still its child)."""
    table: dict[int, tuple[int, int]] = {}  # pid -> (ppid, pgid)
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            fields = _stat(int(entry)) if entry.isdigit() else None
            if fields is None or fields[0] in (b"Z", b"X"):
                continue
            table[int(entry)] = (int(fields[1]), int(fields[2]))
    keep = {pid for pid, (_, pgid) in table.items() if pgid == root}
    if root in table:
        keep.add(root)
    grew = True
    while grew:
        grew = False
        for pid, (ppid, _) in table.items():
            if ppid in keep and pid not in keep:
                keep.add(pid)
                grew = True
    out: dict[int, tuple[int, str]] = {}
    for pid in sorted(keep):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
        except OSError:
            continue
        out[pid] = (table[pid][0], cmd)
    return out


def _fd_file(pid: int, fd: int) -> str:
    """The regular file descriptor ``fd`` of ``pid`` writes to, or ''."""
    try:
        target = os.readlink(f"/proc/{pid}/fd/{fd}")
    except OSError:
        return ""
    return target if target.startswith("/") and os.path.isfile(target) else ""


def rank_of(pid: int, command: str) -> tuple[int | None, str]:
    """The rank ``pid`` says it is, and where that was read ((None, '') when nowhere)."""
    with contextlib.suppress(OSError, ValueError):
        with open(f"/proc/{pid}/environ", "rb") as fh:
            env = dict(item.split(b"=", 1) for item in fh.read().split(b"\0") if b"=" in item)
        for name in (b"RANK", b"LOCAL_RANK"):
            if env.get(name, b"").strip().isdigit():
                return int(env[name]), f"{name.decode()} in its environment"
    m = _RANK_ARG.search(command)
    if m is not None:
        return int(m.group(2)), f"{m.group(0).split()[0].split('=')[0]} in its command line"
    return None, ""


def catches(pid: int, signum: int) -> bool:
    """``pid`` has a handler for ``signum`` (``SigCgt`` of ``/proc/PID/status``)."""
    with contextlib.suppress(OSError, ValueError), open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def last_line(path: str) -> tuple[str, float | None]:
    """The last non-blank line of ``path`` and its age: seconds since the file was written."""
    try:
        with open(path, "rb") as fh:
            mtime = os.fstat(fh.fileno()).st_mtime
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - 65536))
            data = fh.read()
    except OSError:
        return "", None
    lines = [line.strip() for line in data.decode("utf-8", "replace").splitlines()]
    text = next((line for line in reversed(lines) if line), "")
    return text[:LAST_LINE_CHARS], round(max(0.0, time.time() - mtime), 3)


def _read_capped(fh: IO[bytes], cap: int, start: int = 0) -> str:
    fh.seek(start)
    data = fh.read(cap + 1)
    text = data[:cap].decode("utf-8", "replace")
    return text + (f"\n... (cut at {cap} bytes)" if len(data) > cap else "")


_PYSPY_FRAME = re.compile(r"^\s+(\S.*?) \((\S+\.py):(\d+)\)\s*$", re.M)
_FAULT_FRAME = re.compile(r'^\s+File "(.+?)", line (\d+) in (\S+)\s*$', re.M)


def innermost_frame(stack: str) -> str:
    """The innermost Python frame of the first thread in a py-spy or faulthandler dump, as
    ``function (file.py:line)`` ('' when the dump shows none)."""
    m = _PYSPY_FRAME.search(stack)
    if m is not None:
        return f"{m.group(1)} ({m.group(2)}:{m.group(3)})"
    f = _FAULT_FRAME.search(stack)
    if f is not None:
        return f"{f.group(3)} ({os.path.basename(f.group(1))}:{f.group(2)})"
    return ""


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "no output")


def _pyspy_round(
    pyspy: str, procs: Sequence[_Proc], native: bool, deadline: float, cap: int
) -> None:
    """One ``py-spy dump`` per process, all at once, until ``deadline``; sets the method and
    stack of each that worked, a note on each that did not."""
    method = "py-spy --native" if native else "py-spy"
    with contextlib.ExitStack() as files:
        running: list[tuple[_Proc, subprocess.Popen[bytes], IO[bytes], IO[bytes]]] = []
        for p in procs:
            out = files.enter_context(tempfile.TemporaryFile())
            err = files.enter_context(tempfile.TemporaryFile())
            argv = [pyspy, "dump", "--pid", str(p.pid), *(["--native"] if native else [])]
            try:
                proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err)
            except OSError as e:
                p.notes.append(f"{method}: {e}")
                continue
            running.append((p, proc, out, err))
        for p, proc, stdout, stderr in running:
            try:
                code: int | None = proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                p.notes.append(f"{method}: did not finish within the diagnosis deadline")
                code = None
            if code == 0:
                p.method, p.stack = method, _read_capped(stdout, cap)
            elif code is not None:
                reason = _first_line(_read_capped(stderr, 4096) or _read_capped(stdout, 4096))
                p.notes.append(f"{method}: exit {code}: {reason}")


def _dump_grown(path: str, start: int, deadline: float) -> None:
    """Wait until ``path`` grew past ``start`` and then stopped growing (the dump is written at
    once from the signal handler), at most :data:`_FAULTHANDLER_WAIT_S` or until ``deadline``."""
    until = min(deadline, time.monotonic() + _FAULTHANDLER_WAIT_S)
    last = start
    while time.monotonic() < until:
        time.sleep(0.05)
        now = _size(path)
        if last > start and now == last:
            return
        last = now


def _faulthandler(procs: Sequence[_Proc], deadline: float, cap: int) -> None:
    """SIGUSR1 to each process that catches it, one at a time (ranks often share one stderr
    file); its dump is what its stderr file gained."""
    for p in procs:
        if not catches(p.pid, signal.SIGUSR1):
            p.notes.append("faulthandler: the process does not catch SIGUSR1 (no handler)")
            continue
        if not p.stderr:
            p.notes.append("faulthandler: its stderr is not a file to read the dump from")
            continue
        if time.monotonic() >= deadline:
            p.notes.append("faulthandler: not tried, the diagnosis deadline had passed")
            continue
        start = _size(p.stderr)
        try:
            os.kill(p.pid, signal.SIGUSR1)
        except OSError as e:
            p.notes.append(f"faulthandler: {e}")
            continue
        _dump_grown(p.stderr, start, deadline)
        text = ""
        with contextlib.suppress(OSError), open(p.stderr, "rb") as fh:
            text = _read_capped(fh, cap, start)
        if text.strip():
            p.method, p.stack = "faulthandler (SIGUSR1)", text
        else:
            p.notes.append("faulthandler: SIGUSR1 sent, nothing written to its stderr")


def _device(
    platform: str, deadline: float, which: Callable[[str], str | None]
) -> Callable[[], tuple[str, str]]:
    """Start the platform's device tool; the returned call waits for its report."""
    argv = DEVICE_TOOLS.get(platform)
    if argv is None:
        return lambda: (NOT_HERE, "")
    exe = which(argv[0])
    if exe is None:
        return lambda: (f"{NOT_HERE} ({argv[0]} is not on PATH)", argv[0])
    try:
        proc = subprocess.Popen(
            [exe, *argv[1:]],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
    except OSError as e:
        failed = f"{NOT_HERE} ({argv[0]}: {e})"
        return lambda: (failed, argv[0])

    def report() -> tuple[str, str]:
        try:
            out, _ = proc.communicate(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            return f"{NOT_HERE} ({argv[0]} did not answer within the deadline)", argv[0]
        text = out[:65536].decode("utf-8", "replace").strip()
        if proc.returncode != 0:
            return f"{NOT_HERE} ({argv[0]} exited {proc.returncode}: {_first_line(text)})", argv[0]
        return text, argv[0]

    return report


def diagnose(
    root: int,
    *,
    trigger: str,
    platform: str = "cpu",
    deadline_s: float = DEADLINE_S,
    window_s: float = WINDOW_S,
    cap: int = DUMP_CAP,
    which: Callable[[str], str | None] = shutil.which,
) -> HangDiagnosis:
    """What every process of the tree of ``root`` (the started server) is doing, captured
    within ``deadline_s``; ``which`` finds py-spy and the device tool (on PATH)."""
    t0 = time.monotonic()
    deadline = t0 + deadline_s
    started = dt.datetime.now(dt.UTC).isoformat()
    procs = [_Proc(pid, ppid, cmd) for pid, (ppid, cmd) in process_tree(root).items()]
    for p in procs:
        p.log, p.stderr, p.ticks = _fd_file(p.pid, 1), _fd_file(p.pid, 2), cpu_ticks(p.pid)
    logs = {p.log for p in procs if p.log}
    before = {log: _size(log) for log in logs}
    device = _device(platform, deadline, which)
    window = max(0.05, min(window_s, deadline_s / 4))
    w0 = time.monotonic()
    time.sleep(window)
    elapsed = time.monotonic() - w0
    grew = {log: _size(log) - before[log] for log in logs}
    hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    cpu: dict[int, float | None] = {}
    for p in procs:
        now = cpu_ticks(p.pid)
        cpu[p.pid] = (
            None
            if now is None or p.ticks is None
            else round(100.0 * (now - p.ticks) / hz / elapsed, 1)
        )
    # the logs as the hang left them, before any faulthandler dump is written to them
    tails = {log: last_line(log) for log in logs}
    pyspy = which("py-spy")
    if pyspy is None:
        for p in procs:
            p.notes.append("py-spy: not on PATH")
    else:
        # native dumps load every library's symbols (seconds for a torch process): they get
        # 60 % of the time left, so that Python-only dumps still fit when they do not finish
        native_by = time.monotonic() + 0.6 * max(0.0, deadline - time.monotonic())
        _pyspy_round(pyspy, procs, True, native_by, cap)
        _pyspy_round(pyspy, [p for p in procs if not p.stack], False, deadline, cap)
    _faulthandler([p for p in procs if not p.stack], deadline, cap)
    device_text, tool = device()
    ranks = {p.pid: rank_of(p.pid, p.command) for p in procs}
    if root in ranks and ranks[root][0] is None and 0 not in {r for r, _ in ranks.values()}:
        ranks[root] = (0, "the started process (no other process says it is rank 0)")
    out = []
    for p in procs:
        line, age = tails[p.log] if p.log else ("", None)
        out.append(
            ProcessDiagnosis(
                pid=p.pid,
                ppid=p.ppid,
                command=p.command[:1000],
                rank=ranks[p.pid][0],
                rank_source=ranks[p.pid][1],
                cpu_percent=cpu[p.pid],
                log=p.log,
                log_growing=grew[p.log] > 0 if p.log else None,
                log_grew_bytes=max(0, grew[p.log]) if p.log else 0,
                last_line=line,
                last_line_age_s=age,
                stack_method=p.method,
                stack=p.stack,
                stack_notes="; ".join(p.notes),
                where=innermost_frame(p.stack),
            )
        )
    seconds = time.monotonic() - t0
    late = [str(p.pid) for p in procs if any("deadline" in n for n in p.notes)]
    return HangDiagnosis(
        trigger=trigger,
        captured_at=started,
        seconds=round(seconds, 3),
        deadline_s=deadline_s,
        window_s=round(elapsed, 3),
        processes=tuple(sorted(out, key=lambda d: (d.rank is None, d.rank or 0, d.pid))),
        device=device_text,
        device_tool=tool,
        unfinished=f"stacks of pid {', '.join(late)} cut by the deadline" if late else "",
    )
