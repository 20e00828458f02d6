"""The target module of the isolation tests: pairs of functions, one that changes its worker
process and one that observes whether the change reached it, plus process helpers."""

from __future__ import annotations

ISOMOD = '''
import os, signal, subprocess, sys, threading, time, warnings
from pathlib import Path
from harness import probe


def env_set():
    os.environ["HARNESS_LEAK"] = "1"
def env_observe():
    assert "HARNESS_LEAK" not in os.environ, "os.environ['HARNESS_LEAK'] leaked in"

def path_insert():
    sys.path.insert(0, "/leaked/path")
def path_observe():
    assert "/leaked/path" not in sys.path, "sys.path entry leaked in"

def modules_replace():
    import json
    sys.modules["json"] = object()
def modules_observe():
    import json
    assert hasattr(json, "dumps"), f"sys.modules['json'] is {json!r}"

def threads_set():
    import torch
    torch.set_num_threads(7)
def threads_observe():
    import torch
    assert torch.get_num_threads() != 7, "torch.set_num_threads(7) leaked in"

def dtype_set():
    import torch
    torch.set_default_dtype(torch.float64)
def dtype_observe():
    import torch
    assert torch.ones(2).dtype == torch.float32, torch.get_default_dtype()

def deterministic_set():
    import torch
    torch.use_deterministic_algorithms(True)
def deterministic_observe():
    import torch
    assert not torch.are_deterministic_algorithms_enabled(), "deterministic mode leaked in"

def grad_set():
    import torch
    torch.set_grad_enabled(False)
def grad_observe():
    import torch
    x = torch.ones(2, requires_grad=True)
    (x * 2).sum().backward()
    assert x.grad is not None

def seterr_set():
    import numpy as np
    np.seterr(all="raise")
def seterr_observe():
    import numpy as np
    np.log(np.zeros(1))  # FloatingPointError if np.seterr(all="raise") leaked in

def warnings_set():
    warnings.simplefilter("error")
def warnings_observe():
    warnings.warn("a harmless warning", UserWarning)

def recursion_set():
    sys.setrecursionlimit(200)
def recursion_observe():
    def down(n):
        return 0 if n == 0 else 1 + down(n - 1)
    assert down(500) == 500

def sdp_off():
    import torch
    torch.backends.cuda.enable_flash_sdp(False)  # a flag the harness reads but never writes
def sdp_observe():
    import torch
    assert torch.backends.cuda.flash_sdp_enabled(), "flash sdp switched off by a case before"

def close_stdout():
    os.close(1)
def stdout_observe():
    print("observing", flush=True)
    os.write(1, b"fd 1 still works\\n")

def sigusr1_ignore():
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
def sigusr1_observe():
    # The manager sends SIGUSR1 for a stack dump before it kills a hung worker.
    dump = Path(sys.argv[sys.argv.index("--stackdump") + 1])
    before = dump.stat().st_size
    signal.pthread_kill(threading.main_thread().ident, signal.SIGUSR1)
    assert dump.stat().st_size > before, "SIGUSR1 no longer dumps the stacks"

def interrupt_handlers_set():
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda *_: None)
def interrupt_handlers_observe():
    assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN, signal.getsignal(signal.SIGINT)
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL, signal.getsignal(signal.SIGTERM)

def probe_thread():
    import numpy as np
    def spam():
        # Keeps running whatever the probe says: on a loaded machine its first two calls can
        # land inside this case's attempt, where the second raises (an output name is used once
        # per attempt), and a thread that died of that would not be left running.
        while True:
            try:
                probe.output("leak", np.full(96, np.nan, dtype=np.float32), kind="audio")
            except Exception:
                pass
            time.sleep(0.001)
    threading.Thread(target=spam, name="probe-spammer", daemon=True).start()
def probe_observe():
    import numpy as np
    time.sleep(0.3)
    probe.output("mine", np.ones(4, dtype=np.float32), kind="audio")

def rng_consume():
    import random
    import numpy as np
    import torch
    random.seed(999); np.random.seed(1); torch.manual_seed(5)
    random.random(); np.random.random_sample(3); torch.rand(3)
def rng_observe():
    # Every attempt starts from its own seed: what the case before drew or seeded is gone.
    import random
    import numpy as np
    import torch
    seed = probe.seed()
    assert random.random() == random.Random(seed).random()
    assert np.random.random_sample() == np.random.RandomState(seed % 2**32).random_sample()
    mine = torch.Generator().manual_seed(seed)
    assert torch.equal(torch.rand(2), torch.rand(2, generator=mine))

def sys_exit():
    sys.exit(3)
def keyboard_interrupt():
    raise KeyboardInterrupt("stop right here")

def fork_returns(pidfile):
    pid = os.fork()
    if pid == 0:
        Path(pidfile).write_text(str(os.getpid()))
        return  # the child returns from the target into the worker's loop
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    pid = os.fork()
    if pid == 0:
        sys.exit(3)  # a child that exits the Python way keeps its status
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 3

def observe_pid():
    probe.note("pid", os.getpid())

DAEMON = """
import os, sys, time
pid = os.fork()
if pid:
    os.waitpid(pid, 0)
    sys.exit(0)
os.setsid()
grandchild = os.fork()
if grandchild:
    open(sys.argv[1], "w").write(str(grandchild))
    os._exit(0)
time.sleep(300)
"""

def leave_daemons(pidfile):
    sleeper = subprocess.Popen(["sleep", "300"], start_new_session=True)  # setsid sleep 300
    subprocess.run([sys.executable, "-c", DAEMON, pidfile + ".daemon"], check=True)
    Path(pidfile).write_text(str(sleeper.pid))

class _Cycle:
    def __init__(self):
        self.me = self  # only the cyclic collector can free it
        self.blob = bytearray(1 << 16)

_LEFT = []

def cycles_leave():
    import gc, weakref
    nodes = [_Cycle() for _ in range(200)]
    gc.collect()  # alive here, so now in the oldest generation: only a full collection frees them
    _LEFT[:] = [weakref.ref(n) for n in nodes]

_KEPT = []

def cycles_keep():
    import weakref
    nodes = [_Cycle() for _ in range(200)]
    _KEPT[:] = nodes  # alive after this case: the worker must not freeze them for good
    _LEFT[:] = [weakref.ref(n) for n in nodes]

def cycles_drop():
    _KEPT.clear()

def cycles_observe():
    alive = sum(r() is not None for r in _LEFT)
    assert _LEFT and not alive, f"{alive} of {len(_LEFT)} cycles of the case before are still alive"

def frozen_heap():
    import gc
    # What the worker imported before its first attempt (torch, numpy) is frozen: a full
    # collection inside an attempt never walks it, nor garbage that earlier cases left.
    assert gc.get_freeze_count() > 50_000, gc.get_freeze_count()

def import_bulky():
    # A module whose import leaves 60,000 tracked objects (a stack's import, in small).
    import gc
    _BULKY.append(gc.get_freeze_count())
    import isobulky  # noqa: F401
def bulky_frozen():
    import gc
    frozen = gc.get_freeze_count() - _BULKY[0]
    assert frozen >= 60_000, f"only {frozen} objects frozen since the importing case"
    t0 = time.perf_counter()
    gc.collect()
    probe.note("collect_ms", (time.perf_counter() - t0) * 1000)

_BULKY = []

def logger_made():
    import logging
    # a logger made without an import: the next snapshot reads the loggers' states afresh
    logging.getLogger("isomod.made").setLevel(logging.INFO)

def tables_frozen():
    import gc
    from harness.worker import imports
    # The worker's copy of sys.modules (~1,300 entries with torch), which the snapshots share
    # while nothing is imported, is frozen with the snapshot's other tables: the full
    # collection after every attempt walks only what was made since.
    copy = imports._modules_seen
    assert len(copy) > 100, len(copy)
    walked = gc.get_objects()
    assert not any(o is copy for o in walked), "the snapshot's copy of sys.modules is walked"
    probe.note("tracked", len(walked))
    assert len(walked) < 200, f"{len(walked)} objects tracked and not frozen"

def hang_with_pid(pidfile):
    Path(pidfile).write_text(str(os.getpid()))
    time.sleep(600)

def libc_fork_forges():
    """Fork through libc (no at-fork handlers run, so the child keeps the protocol open); the
    child fakes the worker's pid everywhere it is read and returns into the worker's loop,
    which answers "passed" for it. The worker itself fails the case."""
    import ctypes
    worker = os.getpid()
    child = ctypes.CDLL(None).fork()
    if child == 0:
        os.getpid = lambda: worker
        for name in ("main", "attempt", "isolation", "leftovers"):
            mod = sys.modules.get("harness.worker." + name)
            if mod is not None and hasattr(mod, "_getpid"):
                mod._getpid = lambda: worker
        return
    time.sleep(1.0)  # the child answers first
    raise AssertionError("the real result: the worker failed this case")

class _Finalized:
    """A cycle whose finalizers change the process: they run when the collector frees it."""
    def __init__(self):
        import weakref
        self.me = self
        weakref.finalize(self, _finalize_numpy_torch)
    def __del__(self):
        os.environ["HARNESS_GC_LEAK"] = "1"

def _finalize_numpy_torch():
    import numpy as np
    import torch
    np.seterr(all="raise")
    torch.set_default_dtype(torch.float64)

def finalizers_leave():
    _Finalized()  # garbage at once, but only the cyclic collector frees it
def finalizers_observe():
    import numpy as np
    import torch
    assert "HARNESS_GC_LEAK" not in os.environ, "a finalizer's os.environ change leaked in"
    assert np.geterr()["divide"] != "raise", "a finalizer's np.seterr leaked in"
    assert torch.get_default_dtype() == torch.float32, torch.get_default_dtype()
'''

ISOBULKY = """
ROWS = [{"row": i, "cells": [i, str(i)]} for i in range(30_000)]
"""


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie, dead but not reaped by its parent, is not alive)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X")
