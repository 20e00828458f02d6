"""A server case's answers, inside the worker: the outputs each request declares taken from its
JSON answer (a dotted field, decoded as base64, text or JSON, with meta fields), then written
as the attempt's outputs (hashed, NaN/Inf counted and checked to decode, as any output is).

:class:`Outputs` does the writing on one thread of its own while the next request is in
flight (see there); a field missing from an answer fails that request at once.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from harness import probe
from harness.model.server import OutputSpec, RequestSpec
from harness.worker.case_errors import ServerError


def _field(answer: Any, dotted: str) -> Any:
    value = answer
    for part in dotted.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            raise KeyError(part)
    return value


def _output_bytes(value: Any, spec: OutputSpec) -> bytes:
    if spec.decode == "json":
        return json.dumps(value, indent=1).encode()
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {type(value).__name__}")
    if spec.decode == "text":
        return value.encode()
    return base64.b64decode(value, validate=True)


def _answer_outputs(
    i: int, req: RequestSpec, answer: Any, prefix: str
) -> list[tuple[str, OutputSpec, bytes, dict[str, Any]]]:
    """The outputs request ``i`` declares, taken from its ``answer``: (name, spec, bytes,
    meta) each; a missing or undecodable field is a :class:`ServerError` naming it."""
    taken: list[tuple[str, OutputSpec, bytes, dict[str, Any]]] = []
    for name, spec in req.outputs.items():
        try:
            data = _output_bytes(_field(answer, spec.field), spec)
            meta: dict[str, Any] = {
                k: _field(answer, v) if isinstance(v, str) else v for k, v in spec.meta.items()
            }
        except (KeyError, ValueError, TypeError) as e:
            keys = sorted(answer) if isinstance(answer, dict) else type(answer).__name__
            raise ServerError(
                "failed",
                "ServerAnswerMissingOutput",
                f"request #{i} ({req.path}): output '{name}' (field '{spec.field}' decoded as "
                f"{spec.decode}, meta {dict(spec.meta)}) is not in the answer "
                f"({type(e).__name__}: {e}); the answer's keys: {keys}",
            ) from None
        taken.append((f"{prefix}{name}", spec, data, meta))
    return taken


def _record_outputs(taken: list[tuple[str, OutputSpec, bytes, dict[str, Any]]]) -> None:
    """Write, hash and scan (NaN/Inf, decodability) the outputs of one answer."""
    for name, spec, data, meta in taken:
        with probe.output_file(name, spec.suffix, **meta, kind=spec.kind) as path:
            path.write_bytes(data)


def _take_outputs(i: int, req: RequestSpec, answer: Any, prefix: str) -> None:
    """Record request ``i``'s outputs now (what :class:`Outputs` does on its thread)."""
    _record_outputs(_answer_outputs(i, req, answer, prefix))


class Outputs:
    """Records each answer's outputs on one thread of its own while the next request is in
    flight: the files written, hashed and their NaN/Inf counted (an MP4 opened and decoded:
    ~5 ms of CPU per answer of the bundled case, 3-5 % of a tinyav request) overlap the
    server's work instead of adding to each request's round trip. The outputs are taken from
    the answer (a missing field fails the request) before the next request is sent, and
    recorded in request order (one thread); :meth:`finish` waits for them, ends the thread and
    raises the first error one of them hit (as recording them in the loop would have)."""

    def __init__(self) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="harness-outputs")
        self._pending: list[Any] = []

    def take(self, i: int, req: RequestSpec, answer: Any, prefix: str) -> None:
        taken = _answer_outputs(i, req, answer, prefix)
        if taken:
            self._pending.append(self._pool.submit(_record_outputs, taken))

    def finish(self, *, errors: bool = True) -> None:
        """Wait until every answer's outputs are recorded; raise the first error (with
        ``errors``), and end the thread."""
        self._pool.shutdown(wait=True)
        if errors:
            for future in self._pending:
                future.result()


__all__ = ["Outputs"]
