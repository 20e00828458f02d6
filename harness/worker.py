"""The worker process: ``python -m harness.worker``.

It reads one JSON request per line on stdin and answers one JSON line on a private copy of the
original stdout; the target's own prints go to the worker's log, never into the protocol. It
imports targets once and runs attempts back to back. ``faulthandler`` writes the stacks of all
threads to a dump file on a fatal signal and on SIGUSR1, which the manager sends before it kills
a worker whose attempt ran past its timeout.

Requests: ``{"op": "attempt", "case": {...}, "job": {...}}``, ``{"op": "env", "code_root": ...}``,
``{"op": "platform", "platform": ...}``, ``{"op": "exit"}``. Answers: ``{"op": "ready"}``,
``{"op": "result", "attempt": {...}}``, ``{"op": "env", "env": {...}}``,
``{"op": "platform", "available": bool, "detail": str}``.
"""

from __future__ import annotations

import argparse
import faulthandler
import importlib.util
import json
import os
import signal
import sys
import traceback
from pathlib import Path
from typing import IO, Any

from harness.model import json_safe


def _answer(out: IO[str], msg: dict[str, Any]) -> None:
    out.write(json.dumps(json_safe(msg), allow_nan=False, default=str) + "\n")
    out.flush()


def _handle(msg: dict[str, Any]) -> dict[str, Any]:
    op = msg.get("op")
    if op == "attempt":
        from harness.cases import case_from_json
        from harness.execute import run_attempt

        case = case_from_json(msg["case"])
        return {"op": "result", "attempt": run_attempt(msg["job"], case).to_json()}
    if op == "platform":
        from harness.platforms import check

        available, detail = check(str(msg["platform"]))
        return {"op": "platform", "available": available, "detail": detail}
    if op == "env":
        from harness.envinfo import collect_env

        root = msg.get("code_root")
        return {"op": "env", "env": collect_env(Path(root) if root else None)}
    return {"op": "error", "message": f"unknown request op {op!r}"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.worker")
    parser.add_argument("--stackdump", required=True, help="file for faulthandler stack dumps")
    parser.add_argument(
        "--preimport", action="append", default=[], help="module to import at start-up (e.g. torch)"
    )
    args = parser.parse_args(argv)

    proto = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)  # stray prints from the code under test land in the log, not the protocol
    dump = open(args.stackdump, "a", buffering=1)  # noqa: SIM115 - lives as long as the process
    faulthandler.enable(file=dump, all_threads=True)
    faulthandler.register(signal.SIGUSR1, file=dump, all_threads=True)
    # The manager owns interruption: a Ctrl-C in the terminal must not kill a half-done attempt.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for name in args.preimport:
        if importlib.util.find_spec(name) is not None:
            __import__(name)
    threads = os.environ.get("HARNESS_THREADS")
    if threads and "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(int(threads))
    _answer(proto, {"op": "ready", "pid": os.getpid()})
    for line in sys.stdin:
        if not line.strip():
            continue
        msg = json.loads(line)
        if msg.get("op") == "exit":
            break
        try:
            reply = _handle(msg)
        except Exception as exc:  # a bug in the harness itself: report it, keep serving
            reply = {
                "op": "error",
                "message": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc(),
            }
        try:
            _answer(proto, reply)
        except ValueError as exc:  # e.g. NaN in a value: never let the protocol break
            _answer(proto, {"op": "error", "message": f"unserializable reply: {exc}"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
