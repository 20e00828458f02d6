"""What a ``kind = "server"`` case declares: the server to start, how to tell it is ready, the
requests to send and the outputs to take from each answer (loaded by :mod:`harness.cases.server`,
run by :mod:`harness.worker.server_case`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# How an output's value is turned into the bytes of its file.
DECODES: tuple[str, ...] = ("base64", "text", "json")
# The output kind a file suffix implies when an output does not name one.
SUFFIX_KINDS: Mapping[str, str] = {
    ".mp4": "video", ".webm": "video", ".mkv": "video", ".gif": "video", ".avi": "video",
    ".wav": "audio", ".flac": "audio", ".mp3": "audio", ".ogg": "audio",
    ".png": "image", ".jpg": "image", ".jpeg": "image", ".webp": "image",
}  # fmt: skip
OUTPUT_KINDS: tuple[str, ...] = ("video", "audio", "image", "file")


@dataclass(frozen=True)
class ServerSpec:
    """The ``[case.server]`` table. ``command`` and ``env`` values may hold ``{port}`` (a free
    port the harness picks) and ``{python}`` (the worker's interpreter)."""

    command: tuple[str, ...]
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    ranks: int = 1
    ready_url: str | None = None  # a path on the server, e.g. "/health": ready on a 200
    ready_log: str | None = None  # a regex: ready once the server's output matches it
    ready_timeout_s: float = 600.0
    request_timeout_s: float = 300.0
    stop_timeout_s: float = 10.0  # SIGTERM to the group, then this long before SIGKILL
    # Cases whose tables name the same server (and are otherwise equal) share one process per
    # worker: the first starts it, the others reuse it (harness.worker.server_pool).
    name: str | None = None

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> ServerSpec:
        return ServerSpec(**{**d, "command": tuple(d["command"]), "env": dict(d.get("env", {}))})


@dataclass(frozen=True)
class OutputSpec:
    """Where one output is in a JSON answer (``field``, dotted) and how it becomes a file.
    ``meta`` describes it for the checks and the reference store (``fps``, ``sample_rate``):
    a string is a dotted field of the answer, a number is the value itself."""

    field: str
    decode: str = "base64"
    suffix: str = ".bin"
    kind: str = "file"
    meta: Mapping[str, str | int | float] = dataclasses.field(default_factory=dict)


@dataclass(frozen=True)
class RequestSpec:
    """One ``[[case.requests]]``: a JSON ``POST`` to ``path`` and the outputs of its answer."""

    path: str
    json: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    outputs: Mapping[str, OutputSpec] = dataclasses.field(default_factory=dict)

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> RequestSpec:
        outputs = {k: OutputSpec(**v) for k, v in d.get("outputs", {}).items()}
        return RequestSpec(path=d["path"], json=dict(d.get("json", {})), outputs=outputs)
