"""The typed job/reply protocol between the manager and a worker: one JSON object per line.

Every request carries a ``nonce``; every reply echoes it with the worker's pid (and, for an
attempt, the case id and attempt index). The manager accepts a reply only when all of them
match, so a process that is not the worker it started (a forked child that returned from a
target, say) can never answer for it: anything unexpected is a :class:`ProtocolError`. Each
reply is also signed (:func:`sign`) with a key the worker keeps in memory that a fork does not
copy (Linux ``MADV_WIPEONFORK``), so a child forked through libc that fakes the worker's pid
and returns into its loop still cannot answer: its lines are :class:`Unsigned`, and skipped.

Example::

    line = encode(AttemptRequest(nonce="n1", job=job))
    reply = decode_reply(worker_line, nonce="n1", pid=1234, case_id="x", index=0)
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from harness.model import Case, case_from_json, case_to_json, json_dumps

# The JSON of the cases last sent, by identity: a case is prepared once per side and platform
# (harness.execution.resolution) and sent with every attempt of it, so its JSON is made once.
_CASE_JSON: dict[int, tuple[Case, dict[str, Any]]] = {}
_CASE_JSON_MAX = 4096


def _case_json(case: Case) -> dict[str, Any]:
    found = _CASE_JSON.get(id(case))
    if found is not None and found[0] is case:
        return found[1]
    if len(_CASE_JSON) >= _CASE_JSON_MAX:
        _CASE_JSON.clear()
    d = case_to_json(case)
    _CASE_JSON[id(case)] = (case, d)
    return d


def case_json(case: Case) -> dict[str, Any]:
    """The JSON of ``case`` as a request carries it (made once per prepared case)."""
    return _case_json(case)


class ProtocolError(Exception):
    """A line that is not a valid message, or a reply that does not answer the request."""


@dataclass(frozen=True)
class AttemptJob:
    """Everything a worker needs to run one attempt of one case for one side."""

    case: Case
    platform: str
    platform_chain: tuple[str, ...]
    index: int
    seed: int
    repeat: int = 0
    retry: int = 0
    warmup: bool = False
    side: str = "head"
    round: int = 0
    output_dir: str | None = None
    references_root: str | None = None
    # The platform identity the attempt runs as (harness.platforms.Identity JSON), handed to
    # the target by probe.platform_info(); None: only the platform name is known.
    identity: Mapping[str, Any] | None = None
    # A server case with a named (shared) server: no later case of the run needs it, so the
    # worker stops it after this attempt (otherwise it keeps it, until the worker exits).
    server_last: bool = False
    # Compare every attempt with its layered reference (``harness run --explain``), not only
    # one whose quality checks failed; the tolerances are the platform policy's ``[layers]``.
    explain: bool = False
    layer_tolerances: Mapping[str, Any] | None = None
    # A coverage attempt (outside the timed rounds): line coverage of these folders and
    # packages is recorded and sent back with the reply (None: an ordinary attempt).
    coverage: tuple[str, ...] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "explain": self.explain,
            "layer_tolerances": (
                dict(self.layer_tolerances) if self.layer_tolerances is not None else None
            ),
            "case": _case_json(self.case),
            "platform": self.platform,
            "platform_chain": list(self.platform_chain),
            "index": self.index,
            "seed": self.seed,
            "repeat": self.repeat,
            "retry": self.retry,
            "warmup": self.warmup,
            "side": self.side,
            "round": self.round,
            "output_dir": self.output_dir,
            "references_root": self.references_root,
            "identity": dict(self.identity) if self.identity is not None else None,
            "server_last": self.server_last,
            "coverage": list(self.coverage) if self.coverage is not None else None,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> AttemptJob:
        return cls(
            case=case_from_json(d["case"]),
            platform=str(d["platform"]),
            platform_chain=tuple(d["platform_chain"]),
            index=int(d["index"]),
            seed=int(d["seed"]),
            repeat=int(d.get("repeat", 0)),
            retry=int(d.get("retry", 0)),
            warmup=bool(d.get("warmup", False)),
            side=str(d.get("side", "head")),
            round=int(d.get("round", 0)),
            output_dir=d.get("output_dir"),
            references_root=d.get("references_root"),
            identity=d.get("identity"),
            server_last=bool(d.get("server_last", False)),
            explain=bool(d.get("explain", False)),
            layer_tolerances=d.get("layer_tolerances"),
            coverage=tuple(d["coverage"]) if d.get("coverage") is not None else None,
        )


# --- requests (manager -> worker) -------------------------------------------------------------


@dataclass(frozen=True)
class AttemptRequest:
    nonce: str
    job: AttemptJob
    op: str = "attempt"


@dataclass(frozen=True)
class EnvRequest:
    nonce: str
    code_root: str | None = None
    op: str = "env"


@dataclass(frozen=True)
class PlatformRequest:
    nonce: str
    platform: str
    op: str = "platform"
    arch: str | None = None  # the architecture to present when the platform is simulated


@dataclass(frozen=True)
class ExitRequest:
    nonce: str = ""
    op: str = "exit"


Request = AttemptRequest | EnvRequest | PlatformRequest | ExitRequest

# --- replies (worker -> manager) ----------------------------------------------------------------


@dataclass(frozen=True)
class Ready:
    pid: int
    op: str = "ready"


@dataclass(frozen=True)
class AttemptReply:
    nonce: str
    pid: int
    case_id: str
    index: int
    attempt: Mapping[str, Any]
    # The attempt left state behind that cannot be undone: start a new worker after it.
    replace_worker: bool = False
    op: str = "result"
    # A coverage attempt's executed lines: absolute file -> line numbers (or why none).
    coverage: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class EnvReply:
    nonce: str
    pid: int
    env: Mapping[str, Any]
    # The probe imported torch, which the worker had not (its profile's preimport leaves torch
    # out, and a device runtime's build was asked for its devices): start a new worker after it.
    replace_worker: bool = False
    op: str = "env"


@dataclass(frozen=True)
class PlatformReply:
    nonce: str
    pid: int
    available: bool
    detail: str
    op: str = "platform"
    identity: Mapping[str, Any] | None = None  # harness.platforms.resolve_identity(...) JSON
    replace_worker: bool = False  # as EnvReply's


@dataclass(frozen=True)
class ErrorReply:
    """The worker caught a bug of the harness itself while serving a request."""

    nonce: str
    pid: int
    message: str
    traceback: str = ""
    op: str = "error"


Reply = Ready | AttemptReply | EnvReply | PlatformReply | ErrorReply

_REQUESTS: dict[str, type[Any]] = {
    "attempt": AttemptRequest,
    "env": EnvRequest,
    "platform": PlatformRequest,
    "exit": ExitRequest,
}
_REPLIES: dict[str, type[Any]] = {
    "ready": Ready,
    "result": AttemptReply,
    "env": EnvReply,
    "platform": PlatformReply,
    "error": ErrorReply,
}


class Unsigned(ProtocolError):
    """A reply line without the worker's signature: some other process (a child forked from
    the worker that did not close its copy of the protocol) wrote it."""


# How many random bytes a worker's reply key has (handed over a pipe at start, see pool).
KEY_BYTES = 32


def sign(key: bytes | memoryview, nonce: str) -> str:
    """The signature of the reply to request ``nonce`` under a worker's reply ``key``."""
    return hashlib.blake2b(nonce.encode(), key=key, digest_size=16).hexdigest()


def encode(msg: Request | Reply, *, key: str | None = None) -> str:
    """One line of JSON (non-finite floats spelled as strings), newline included; a reply
    carries its signature ``key`` (:func:`sign`) when the worker has one."""
    d: dict[str, Any] = {}
    for name in msg.__dataclass_fields__:
        v = getattr(msg, name)
        d[name] = v.to_json() if isinstance(v, AttemptJob) else v
    if key is not None:
        d["key"] = key
    return json_dumps(d) + "\n"


def job_text(job: AttemptJob) -> str:
    """The JSON text of ``job``, for :func:`encode_attempt`."""
    return json_dumps(job.to_json())


def encode_attempt(nonce: str, job: str) -> str:
    """The line of an :class:`AttemptRequest` whose job's JSON text (:func:`job_text`) was made
    before its nonce was known; it reads back as :func:`encode`'s line does."""
    return f'{{"nonce": {json.dumps(nonce)}, "job": {job}, "op": "attempt"}}\n'


def _parse(line: str | bytes, table: Mapping[str, type[Any]], key: bytes | None = None) -> Any:
    try:
        d = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"not a JSON line: {exc}: {str(line)[:200]!r}") from None
    if key is not None and (
        not isinstance(d, dict) or d.get("key") != sign(key, str(d.get("nonce") or ""))
    ):
        raise Unsigned(f"a line not signed by the worker: {str(line)[:200]!r}")
    if not isinstance(d, dict) or d.get("op") not in table:
        raise ProtocolError(f"unknown message {str(d)[:200]!r}")
    cls = table[d["op"]]
    kw = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
    try:
        if cls is AttemptRequest:
            kw["job"] = AttemptJob.from_json(d["job"])
        return cls(**kw)
    except (KeyError, TypeError, ValueError) as exc:
        raise ProtocolError(f"malformed {d['op']!r} message: {exc!r}") from None


def decode_request(line: str | bytes) -> Request:
    msg: Request = _parse(line, _REQUESTS)
    return msg


def decode_reply(
    line: str | bytes,
    *,
    nonce: str | None,
    pid: int,
    case_id: str | None = None,
    index: int | None = None,
    key: bytes | None = None,
) -> Reply:
    """Parse a reply and check that it answers this request from this worker (and, with the
    worker's reply ``key``, that it is signed with it: :class:`Unsigned` otherwise)."""
    msg: Reply = _parse(line, _REPLIES, key)
    if msg.pid != pid:
        raise ProtocolError(
            f"reply from pid {msg.pid}, but the worker is pid {pid} (a forked child answered?)"
        )
    if nonce is not None and getattr(msg, "nonce", None) != nonce:
        raise ProtocolError(
            f"reply for request {getattr(msg, 'nonce', None)!r}, expected {nonce!r}"
        )
    if isinstance(msg, AttemptReply) and (msg.case_id != case_id or msg.index != index):
        raise ProtocolError(
            f"reply for case {msg.case_id!r} attempt {msg.index}, "
            f"expected case {case_id!r} attempt {index}"
        )
    return msg


__all__ = [
    "KEY_BYTES",
    "AttemptJob",
    "AttemptReply",
    "AttemptRequest",
    "EnvReply",
    "EnvRequest",
    "ErrorReply",
    "ExitRequest",
    "PlatformReply",
    "PlatformRequest",
    "ProtocolError",
    "Ready",
    "Reply",
    "Request",
    "Unsigned",
    "case_json",
    "decode_reply",
    "decode_request",
    "encode",
    "encode_attempt",
    "job_text",
    "sign",
]
