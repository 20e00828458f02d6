"""One attempt, inside a worker: seed, call the target, record everything, run the checks.

A call is recorded, never allowed to escape: whatever the target does (returns, fails an
assertion, raises, prints), the result is one attempt record. Only a crash of the whole
interpreter escapes, and the manager records that one.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import importlib
import importlib.util
import os
import random
import re
import subprocess
import sys
import time
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness import probe
from harness.cases import Case
from harness.checks import evaluate_attempt_checks
from harness.model import Attempt, ErrorInfo

_OOM_TYPES = {"OutOfMemoryError", "MemoryError"}


def error_signature(exc_type: str, message: str) -> str:
    """A short stable id for "the same failure": numbers, addresses and paths are blanked."""
    first = message.strip().splitlines()[0] if message.strip() else ""
    norm = re.sub(r"0x[0-9a-fA-F]+", "0x?", first)
    norm = re.sub(r"(/[^\s:'\"]+)+", "<path>", norm)
    norm = re.sub(r"\d+(\.\d+)?", "N", norm)
    digest = hashlib.sha256(f"{exc_type}:{norm}".encode()).hexdigest()[:12]
    return f"{exc_type}:{digest}"


def make_error(exc_type: str, message: str, tb: str = "") -> ErrorInfo:
    return ErrorInfo(exc_type, message, error_signature(exc_type, message), tb)


def seed_everything(seed: int) -> None:
    """Seed Python's random, numpy and torch (when installed) from the case seed."""
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed % (2**32))
    except ImportError:  # pragma: no cover - numpy is a dependency
        pass
    if "torch" in sys.modules or importlib.util.find_spec("torch") is not None:
        import torch

        torch.manual_seed(seed)


def resolve_target(spec: str) -> Any:
    module_name, _, func_name = spec.partition(":")
    module = importlib.import_module(module_name)
    try:
        return getattr(module, func_name)
    except AttributeError:
        raise AttributeError(
            f"target '{spec}': module '{module_name}' ({getattr(module, '__file__', '?')}) "
            f"has no attribute '{func_name}'"
        ) from None


def _run_command(case: Case, result_file: Path, timeout_s: float) -> None:
    """Run a ``command`` case; a non-zero exit fails it. It may write JSON to the result file."""
    result_file.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, HARNESS_RESULT_FILE=str(result_file))
    proc = subprocess.run(
        list(case.command or ()),
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    if proc.returncode != 0:
        tail = (proc.stdout[-2000:] + proc.stderr[-2000:]).strip()
        raise AssertionError(f"command {list(case.command or ())} exited {proc.returncode}\n{tail}")
    if result_file.is_file():
        import json

        data = json.loads(result_file.read_text())
        for k, v in data.get("notes", {}).items():
            probe.note(k, v)


def run_attempt(job: Mapping[str, Any], case: Case) -> Attempt:
    """Execute one attempt described by ``job`` (a manager message) and record it."""
    seed = int(job["seed"])
    platform = str(job["platform"])
    output_dir = Path(job["output_dir"]) if job.get("output_dir") else None
    started = dt.datetime.now(dt.UTC).isoformat()
    seed_everything(seed)
    rec = probe._begin(seed, platform, output_dir)
    cwd = os.getcwd()  # a target that chdirs must not move the attempts after it
    status = "passed"
    error: ErrorInfo | None = None
    t0 = time.perf_counter()
    try:
        if case.command is not None:
            _run_command(case, (output_dir or Path(".")) / "result.json", case.timeout_s)
        else:
            fn = resolve_target(str(case.target))
            fn(**dict(case.params))
    except AssertionError as exc:
        status = "failed"
        error = make_error("AssertionError", str(exc) or "assertion failed", traceback.format_exc())
    except Exception as exc:
        status = "error"
        etype = type(exc).__name__
        error = make_error(etype, str(exc), traceback.format_exc())
    finally:
        duration = time.perf_counter() - t0
        probe._end()
        os.chdir(cwd)
    checks = evaluate_attempt_checks(
        case,
        platform_chain=tuple(job.get("platform_chain", (platform, "any"))),
        outputs=rec.outputs,
        arrays=rec.output_arrays,
        notes=rec.notes,
        references_root=job.get("references_root"),
        ran=status == "passed",
    )
    if status == "passed" and any(c.blocking for c in checks):
        status = "failed"
        failed = [
            f"{c.name}: {c.reason or f'{c.value} (want {c.op} {c.threshold})'}"
            for c in checks
            if c.blocking
        ]
        error = make_error("CheckFailed", "checks failed: " + "; ".join(failed))
    return Attempt(
        case_id=case.id,
        platform=platform,
        index=int(job["index"]),
        status=status,  # type: ignore[arg-type]
        seed=seed,
        warmup=bool(job.get("warmup", False)),
        retry=int(job.get("retry", 0)),
        repeat=int(job.get("repeat", 0)),
        inputs=rec.inputs,
        stages=rec.stages,
        fingerprints=rec.fingerprints,
        notes=rec.notes,
        outputs=rec.outputs,
        checks=tuple(checks),
        error=error,
        duration_s=duration,
        worker_pid=os.getpid(),
        started_at=started,
        fresh_process=case.fresh_process,
    )
