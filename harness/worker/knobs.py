"""The process-global settings that :mod:`.isolation` reads and puts back around every attempt,
as tables: the interpreter's (``sys``, ``gc``, ``os``, ``locale``, resource limits), numpy's and
torch's.

Each table entry is a *knob*: ``(label, get, set)``, set back when it changed, or a *watched*
flag: ``(label, get)``, read before and after but never written (because torch offers no
setter, or setting it back could itself change the process: the inter-op pool can be sized
only once, inference mode and the mode stacks are held by guard objects). A change to a
watched flag fails the attempt and replaces the worker. Every getter is a plain read of a
global flag: nothing here imports torch or numpy (they are looked at only when the worker
already imported them), allocates a tensor or initializes a device.
"""

from __future__ import annotations

import _locale
import functools
import gc
import locale
import os
import sys
import threading
import warnings
from collections.abc import Callable, Sequence
from typing import Any

# sys attributes a target may replace that the knob table below puts back (the module
# attribute watch of :mod:`.process_state` leaves them to it).
SYS_KNOBS: tuple[str, ...] = (
    "stdin",
    "stdout",
    "stderr",
    "excepthook",
    "displayhook",
    "unraisablehook",
    "breakpointhook",
    "dont_write_bytecode",
)

try:
    import resource
except ImportError:  # pragma: no cover - not on Windows
    resource = None  # type: ignore[assignment]

Knob = tuple[str, Callable[[], Any], Callable[[Any], Any]]
Watched = tuple[str, Callable[[], Any]]
MISSING = object()  # a getter that raised


def _umask() -> int:
    old = os.umask(0o022)
    os.umask(old)
    return old


def _attr(obj: Any, name: str) -> Knob:
    label = f"{getattr(obj, '__name__', obj)}.{name}"
    return label, functools.partial(getattr, obj, name), functools.partial(setattr, obj, name)


INTERPRETER: tuple[Knob, ...] = (
    ("the working directory", os.getcwd, os.chdir),
    ("os.umask", _umask, os.umask),
    (
        "the locale",
        functools.partial(_locale.setlocale, locale.LC_ALL),  # the query: no Python frame
        lambda v: locale.setlocale(locale.LC_ALL, v),
    ),
    ("sys.getrecursionlimit()", sys.getrecursionlimit, sys.setrecursionlimit),
    ("sys.getswitchinterval()", sys.getswitchinterval, sys.setswitchinterval),
    ("sys.get_int_max_str_digits()", sys.get_int_max_str_digits, sys.set_int_max_str_digits),
    ("sys.gettrace()", sys.gettrace, sys.settrace),
    ("sys.getprofile()", sys.getprofile, sys.setprofile),
    ("threading.gettrace()", threading.gettrace, threading.settrace),
    ("threading.getprofile()", threading.getprofile, threading.setprofile),
    ("gc.isenabled()", gc.isenabled, lambda on: gc.enable() if on else gc.disable()),
    ("gc.get_threshold()", gc.get_threshold, lambda t: gc.set_threshold(*t)),
    ("gc.get_debug()", gc.get_debug, gc.set_debug),
    *(_attr(sys, n) for n in SYS_KNOBS),
    _attr(threading, "excepthook"),
    _attr(warnings, "showwarning"),
    _attr(warnings, "formatwarning"),
)


def _rlimit(name: str) -> Knob:
    which = getattr(resource, name)
    # partials of the C functions: no Python frame per read (16 limits, every attempt)
    return (
        f"resource.{name}",
        functools.partial(resource.getrlimit, which),
        functools.partial(resource.setrlimit, which),
    )


# A lowered limit (RLIMIT_AS, say) would fail the next case for no reason of its own; a raised
# hard limit cannot be lowered back by an unprivileged process, which put_back reports. Every
# limit this platform has (RLIMIT_NPROC, RLIMIT_MEMLOCK, RLIMIT_NICE, ... too).
INTERPRETER += tuple(
    _rlimit(n)
    for n in sorted(dir(resource) if resource is not None else ())
    if n.startswith("RLIMIT_") and n != "RLIMIT_OFILE"  # an alias of RLIMIT_NOFILE
)


def _socket_timeout() -> Any:
    sock = sys.modules.get("socket")  # looked at only once imported
    return sock.getdefaulttimeout() if sock is not None else None


def _set_socket_timeout(value: Any) -> None:
    sock = sys.modules.get("socket")
    if sock is not None:
        sock.setdefaulttimeout(value)


# The scheduler's view of the process: CPUs it may run on (os.sched_setaffinity) and its
# niceness (os.nice; lowering it back needs privilege, else put_back reports it); and the
# default timeout of every new socket.
INTERPRETER += (("socket.getdefaulttimeout()", _socket_timeout, _set_socket_timeout),)
if hasattr(os, "sched_getaffinity"):
    INTERPRETER += (
        (
            "os.sched_getaffinity(0)",
            functools.partial(os.sched_getaffinity, 0),
            lambda v: os.sched_setaffinity(0, v),
        ),
    )
if hasattr(os, "getpriority"):
    INTERPRETER += (
        (
            "os.nice() (the process's niceness)",
            functools.partial(os.getpriority, os.PRIO_PROCESS, 0),
            lambda v: os.setpriority(os.PRIO_PROCESS, 0, v),
        ),
    )

# torch.backends switches that torch._C can read and write as _get_<name> / _set_<name>.
_TORCH_SWITCHES: tuple[tuple[str, str], ...] = (
    ("torch.backends.cudnn.enabled", "cudnn_enabled"),
    ("torch.backends.cudnn.benchmark", "cudnn_benchmark"),
    ("torch.backends.cudnn.deterministic", "cudnn_deterministic"),
    ("torch.backends.cudnn.allow_tf32", "cudnn_allow_tf32"),
    ("torch.backends.cuda.matmul.allow_tf32", "cublas_allow_tf32"),
    ("torch.backends.mkldnn.enabled", "mkldnn_enabled"),
    ("torch.backends.nnpack.enabled", "nnpack_enabled"),
)

# Global flags read through torch._C._get_<name>() (those this torch has), watched only.
# Left out on purpose: the preferred BLAS / ROCm flash-attention backends (reading them can
# query the GPU's architecture, i.e. initialize the device).
_TORCH_WATCHED: tuple[tuple[str, str], ...] = (
    ("torch.backends.cuda.flash_sdp_enabled()", "flash_sdp_enabled"),
    ("torch.backends.cuda.mem_efficient_sdp_enabled()", "mem_efficient_sdp_enabled"),
    ("torch.backends.cuda.math_sdp_enabled()", "math_sdp_enabled"),
    ("torch.backends.cuda.cudnn_sdp_enabled()", "cudnn_sdp_enabled"),
    ("torch.backends.cuda.fa3_sdp_enabled()", "fa3_sdp_enabled"),
    ("torch.backends.cuda.overrideable_sdp_enabled()", "overrideable_sdp_enabled"),
    ("torch math sdp fp16/bf16 reduction", "math_sdp_allow_fp16_bf16_reduction"),
    ("torch.backends.cuda.preferred_linalg_library()", "linalg_preferred_backend"),
    (
        "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction",
        "cublas_allow_fp16_reduced_precision_reduction",
    ),
    (
        "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction",
        "cublas_allow_bf16_reduced_precision_reduction",
    ),
    ("torch.backends.cuda.matmul.allow_fp16_accumulation", "cublas_allow_fp16_accumulation"),
    (
        "torch.backends.cpu fp16 reduced-precision reduction",
        "cpu_allow_fp16_reduced_precision_reduction",
    ),
    ("torch.backends.mkldnn.deterministic", "mkldnn_deterministic"),
    ("torch.backends.mkldnn.allow_tf32", "onednn_allow_tf32"),
    ("torch.backends.miopen.immediate", "miopen_immediate"),
    ("torch.backends.quantized.engine", "qengine"),
    (
        "torch.utils.deterministic.fill_uninitialized_memory",
        "deterministic_fill_uninitialized_memory",
    ),
    ("torch warn-always mode (torch.set_warn_always)", "warnAlways"),
    ("torch backcompat broadcast warning", "backcompat_broadcast_warn"),
    ("torch backcompat keepdim warning", "backcompat_keepdim_warn"),
    ("torch autograd fallback mode", "autograd_fallback_mode"),
    ("torch graph executor optimize", "graph_executor_optimize"),
    ("torch function state", "torch_function_state"),
    ("torch default device (C++)", "default_device"),
)


def call(get: Callable[[], Any]) -> Any:
    """``get()``, or :data:`MISSING` where it raised."""
    try:
        return get()
    except Exception:
        return MISSING


def read(entries: Sequence[tuple[Any, ...]]) -> list[Any]:
    """The value of every knob or watched flag (:data:`MISSING` where its getter raised)."""
    try:
        return [e[1]() for e in entries]  # one pass: this runs twice an attempt
    except Exception:
        return [call(e[1]) for e in entries]


def put_back(
    knobs: tuple[Knob, ...], saved: list[Any], restored: list[str], violations: list[str]
) -> None:
    """Set back every knob whose value is not ``saved`` any more: its label goes to
    ``restored``, or to ``violations`` (with both values) when its setter refused."""
    now = read(knobs)
    try:
        if now == saved:  # the usual case, one comparison
            return
    except Exception:  # an object whose == raises: look at each
        pass
    for (label, _, put), before, value in zip(knobs, saved, now, strict=True):
        if value is before or before is MISSING:
            continue
        try:
            if value == before:
                continue
        except Exception:  # treat it as changed
            pass
        try:
            put(before)
            restored.append(label)
        except Exception as exc:
            violations.append(
                f"{label} changed from {before!r} to {value!r} and could not be set back ({exc})"
            )


# A subnormal float: a product that keeps it shows the FPU does not flush denormals to zero
# (torch.set_flush_denormal sets the FTZ/DAZ bits of the thread; torch has no getter). Module
# globals, so that the product is computed at run time, on the FPU, not folded at compile time.
_SUBNORMAL = 5e-324
_ONE = 1.0


def denormals_flushed() -> bool:
    """Whether this thread's FPU flushes denormals to zero."""
    return _SUBNORMAL * _ONE == 0.0


def numpy_knobs() -> tuple[Knob, ...]:
    """numpy's error state, error callback and print options (empty when numpy is not in)."""
    np = sys.modules.get("numpy")
    return _numpy_knobs(np) if np is not None else ()


@functools.cache
def _numpy_knobs(np: Any) -> tuple[Knob, ...]:
    return (
        ("numpy.geterr()", np.geterr, lambda d: np.seterr(**d)),
        ("numpy.geterrcall()", np.geterrcall, np.seterrcall),
        ("numpy.get_printoptions()", np.get_printoptions, lambda d: np.set_printoptions(**d)),
    )


def torch_knobs() -> tuple[tuple[Knob, ...], tuple[Watched, ...]]:
    """torch's restorable knobs and its watched flags (both empty when torch is not in)."""
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "_C"):  # absent, or half-way through its import
        return (), ()
    return _torch_knobs(torch)


@functools.cache
def _torch_knobs(torch: Any) -> tuple[tuple[Knob, ...], tuple[Watched, ...]]:
    c = torch._C

    def deterministic() -> tuple[bool, bool]:
        return c._get_deterministic_algorithms(), c._get_deterministic_algorithms_warn_only()

    def anomaly() -> tuple[bool, bool]:
        return torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled()

    knobs: list[Knob] = [
        ("torch.get_num_threads()", torch.get_num_threads, torch.set_num_threads),
        ("torch.get_default_dtype()", torch.get_default_dtype, torch.set_default_dtype),
        (
            "torch.are_deterministic_algorithms_enabled()",
            deterministic,
            lambda v: torch.use_deterministic_algorithms(v[0], warn_only=v[1]),
        ),
        ("torch.is_grad_enabled()", torch.is_grad_enabled, c._set_grad_enabled),
        (
            "torch.get_float32_matmul_precision()",
            torch.get_float32_matmul_precision,
            torch.set_float32_matmul_precision,
        ),
        ("torch.is_anomaly_enabled()", anomaly, lambda v: torch.set_anomaly_enabled(*v)),
        ("torch.set_flush_denormal()", denormals_flushed, torch.set_flush_denormal),
    ]
    for label, name in _TORCH_SWITCHES:
        get, put = getattr(c, f"_get_{name}", None), getattr(c, f"_set_{name}", None)
        if callable(get) and callable(put):
            knobs.append((label, get, put))
    watched: list[Watched] = [
        ("torch.get_num_interop_threads()", torch.get_num_interop_threads),
        ("torch.is_inference_mode_enabled()", torch.is_inference_mode_enabled),
    ]
    for label, name in (
        ("the torch function mode stack (e.g. set_default_device)", "_len_torch_function_stack"),
        ("the torch dispatch mode stack", "_len_torch_dispatch_stack"),
        ("torch autocast (enabled outside a context manager)", "_is_any_autocast_enabled"),
    ):
        fn = getattr(c, name, None)
        if callable(fn):
            watched.append((label, fn))
    for label, name in _TORCH_WATCHED:
        fn = getattr(c, f"_get_{name}", None)
        if callable(fn):
            watched.append((label, fn))
    return tuple(knobs), tuple(watched)


__all__ = [
    "INTERPRETER",
    "MISSING",
    "Knob",
    "Watched",
    "call",
    "numpy_knobs",
    "put_back",
    "read",
    "torch_knobs",
]
