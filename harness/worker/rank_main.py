"""One rank of a multi-rank case: ``python -m harness.worker.rank_main JOB.json``.

Started by :mod:`harness.worker.ranks_case` with ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR`` and ``MASTER_PORT`` set. It seeds as the worker does, records the target's
probe calls into its own recorder (rank 0's outputs into the attempt's output folder, other
ranks' nowhere), and writes what it recorded, with how the target ended, as JSON to the job's
``result`` file. SIGUSR1 dumps every thread's stack to stderr (its log), so a hang is visible
without py-spy, and on Linux it dies with the worker that started it.
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any


def _die_with_parent() -> None:
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


def _error(kind: str, message: str) -> dict[str, Any]:
    """The failure of this rank, with when it happened (wall clock, comparable across ranks:
    the rank that failed first is the likely cause of the others' failures)."""
    return {
        "type": kind,
        "message": message,
        "traceback": traceback.format_exc(),
        "failed_at": time.time(),
    }


def _run(job: dict[str, Any]) -> dict[str, Any]:
    from harness import probe
    from harness.model import case_from_json
    from harness.worker.target import resolve_target, seed_everything, stage_device

    case = case_from_json(job["case"])
    out = Path(job["output_dir"]) if job.get("output_dir") else None
    seed_everything(int(job["seed"]))
    platform = str(job["platform"])
    rec = probe._begin(
        job["seed"], platform, out, device=stage_device(platform), info=job.get("identity")
    )
    status, error = "passed", None
    try:
        fn = resolve_target(str(case.target))
        # Which file this rank's target came from, as the worker records it (code provenance).
        module = sys.modules.get(getattr(fn, "__module__", "") or "")
        file = getattr(module, "__file__", None)
        probe.note("harness.target_file", os.path.abspath(file) if file else "None")
        fn(**dict(case.params))
    except AssertionError as exc:
        status = "failed"
        error = _error("AssertionError", str(exc) or "assertion failed")
    except BaseException as exc:  # recorded, never escaping: the result file says how it ended
        status = "error"
        error = _error(type(exc).__name__, str(exc))
    probe._end()
    return {
        "status": status,
        "error": error,
        "unclosed": list(rec.unclosed),
        **probe.snapshot(rec),
    }


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m harness.worker.rank_main JOB.json", file=sys.stderr)
        return 2
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    _die_with_parent()
    job = json.loads(Path(args[0]).read_text(encoding="utf-8"))
    result = _run(job)
    path = Path(job["result"])
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, default=str), encoding="utf-8")
    tmp.replace(path)
    sys.stdout.flush()
    sys.stderr.flush()
    return 0 if result["status"] == "passed" else 1


if __name__ == "__main__":
    # os._exit: a process group's threads (gloo's) must not hold the interpreter's shutdown.
    os._exit(main())
