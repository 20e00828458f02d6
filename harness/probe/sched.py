"""Run-queue delay of this process's threads (Linux), from ``/proc/self/task/<tid>/schedstat``.

A thread's ``schedstat`` holds three numbers: nanoseconds it ran on a CPU, nanoseconds it was
runnable but waiting on a run queue (its *run-queue delay*: time other processes' load took
from it) and how many times it ran. :class:`ThreadClocks` reads them for every thread through
file descriptors it keeps open (a ``pread`` at offset 0 regenerates the file: about 2 µs a
thread, where opening and reading it costs 20 µs), and lists ``/proc/self/task`` again only
when it must: on first use and when asked (once an attempt), in a forked child, when a thread
it reads has ended, and when the process spent more CPU time over a span than the threads it
knows account for (a thread it does not know yet ran: torch's intra-op pool starting, say).

How threads combine into one span's run-queue delay (:func:`span_wait`): the largest delay of
any single thread over the span, capped at the span's wall time. The thread that runs a stage
loses its delay to wall time directly; the threads of an intra-op pool lengthen wall time by
their delays while the stage waits for them, but their delays overlap one another's and the
caller's (every runnable thread of the process queues behind the same other processes at the
same time), so their sum would count the same lost time two or three times and read a stage
faster than it runs uncontended. The largest single delay removes no more than one thread lost,
so wall time less it can leave some contention in but hardly any of the code's own time out
(``bench/bench_contention.py`` measures it). A thread that ended inside the span adds nothing;
a thread first seen at the span's end counts in full (it started inside the span).

Where there is no ``/proc/self/task`` (not Linux), :attr:`ThreadClocks.available` is False and
every sample is empty: no run-queue delay is recorded, and budgets judge wall time.
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
from os import pread

# tid -> (nanoseconds on a CPU, nanoseconds waiting on a run queue), as last read.
Sample = dict[int, tuple[int, int]]

_TASKS = "/proc/self/task"
_NO_THREAD: tuple[int, int] = (0, 0)
# CPU time the known threads may fall short of the process's before a thread is presumed
# unknown: the reads themselves take microseconds, and a thread that ran less than this
# cannot have lengthened a span by more.
_UNACCOUNTED_NS = 1_000_000


class ThreadClocks:
    """Samples ``schedstat`` of every thread of this process; see the module docstring.

    The fast path takes no lock: it reads the tuple of (tid, fd) that the last listing left
    (replaced whole, never changed in place); listing again, and recovering from a thread that
    ended or an fd someone closed, happen under the lock.
    """

    __slots__ = ("_fds", "_lock", "_stale", "available")

    def __init__(self) -> None:
        self._fds: tuple[tuple[int, int], ...] = ()
        self._lock = threading.Lock()
        self._stale = True
        self.available = os.path.isdir(_TASKS)
        if self.available:
            os.register_at_fork(after_in_child=self._forked)

    def sample(self, *, relist: bool = False) -> Sample:
        """Every known thread's (CPU ns, run-queue ns); ``relist`` lists the threads first."""
        if relist or self._stale:
            if not self.available:
                return {}
            with self._lock:
                self._relist()
        out: Sample = {}
        try:
            for tid, fd in self._fds:
                ran, waited, _ = pread(fd, 128, 0).split()
                out[tid] = (int(ran), int(waited))
        except (OSError, ValueError):
            return self._recover()
        return out

    def threads(self) -> tuple[int, ...]:
        """The thread ids read now (as of the last listing)."""
        return tuple(tid for tid, _ in self._fds)

    def finish(self, before: Sample, cpu_s: float, wall_s: float) -> float:
        """Run-queue delay in seconds over a span that began with the sample ``before``, took
        ``wall_s`` and in which the process spent ``cpu_s`` CPU seconds (0.0 where nothing
        can be read). When the threads known do not account for that CPU time, the threads
        are listed again, so one that started inside the span is read too."""
        wait, unaccounted = _combine(before, self.sample(), cpu_s)
        if unaccounted and self.available:
            wait, _ = _combine(before, self.sample(relist=True), cpu_s)
        return min(wait, wall_s) if wall_s > 0 else 0.0

    def _recover(self) -> Sample:
        """Read every known thread, dropping those that cannot be read: an ended thread's fd
        is closed; an fd that is not ours any more (a target closed it, or opened another file
        on its number) is forgotten, never closed. Then list the threads again and read them."""
        with self._lock:
            kept = []
            for tid, fd in self._fds:
                try:
                    int(pread(fd, 128, 0).split()[1])
                except OSError as exc:
                    if exc.errno != errno.EBADF:
                        _close(fd)
                    continue
                except (ValueError, IndexError):
                    continue
                kept.append((tid, fd))
            self._fds = tuple(kept)
            self._relist()
            out: Sample = {}
            for tid, fd in self._fds:
                try:
                    ran, waited, _ = pread(fd, 128, 0).split()
                    out[tid] = (int(ran), int(waited))
                except (OSError, ValueError):
                    continue  # ended this instant: the next sample drops it
            return out

    def _forked(self) -> None:
        """In a forked child the fds name the parent's threads: close them, list afresh."""
        for _, fd in self._fds:
            _close(fd)
        self._fds = ()
        self._lock = threading.Lock()
        self._stale = True

    def _relist(self) -> None:
        try:
            names = os.listdir(_TASKS)
        except OSError:
            names = []
        old = dict(self._fds)
        fds = []
        for name in names:
            tid = int(name)
            fd = old.pop(tid, None)
            if fd is None:
                try:
                    fd = os.open(f"{_TASKS}/{name}/schedstat", os.O_RDONLY)
                except OSError:
                    continue  # ended since the listing
            fds.append((tid, fd))
        for fd in old.values():
            _close(fd)
        self._fds = tuple(fds)
        self._stale = False


def _close(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)


def _combine(before: Sample, after: Sample, cpu_s: float) -> tuple[float, bool]:
    """(the largest single thread's run-queue delay in seconds between the samples, whether
    the process spent more CPU time than the threads in ``after`` account for)."""
    worst = known = 0
    for tid, (ran, waited) in after.items():
        ran0, waited0 = before.get(tid, _NO_THREAD)
        known += ran - ran0
        if waited - waited0 > worst:
            worst = waited - waited0
    spent = cpu_s * 1e9
    return worst / 1e9, spent - known > max(_UNACCOUNTED_NS, 0.05 * spent)


def span_wait(before: Sample, after: Sample, wall_s: float) -> float:
    """Run-queue delay in seconds between two samples: the largest of any one thread's,
    capped at the span's wall time ``wall_s`` (see the module docstring)."""
    worst, _ = _combine(before, after, 0.0)
    return min(worst, wall_s) if wall_s > 0 else 0.0


# The process's one reader: stages and attempts share its open fds.
CLOCKS = ThreadClocks()
