"""The ``[case.server]`` table and the ``[[case.requests]]`` of a ``kind = "server"`` case.

Every problem is one line naming the file, the case, the key (``server.ready_url``,
``requests[0].outputs.video.decode``), the value and what was expected.
"""

from __future__ import annotations

import re
from typing import Any

from harness.cases.fields import Ctx, check_json, check_keys, finite, str_list, type_ok
from harness.errors import CaseFileError
from harness.model.server import (
    DECODES,
    OUTPUT_KINDS,
    SUFFIX_KINDS,
    OutputSpec,
    RequestSpec,
    ServerSpec,
)
from harness.model.vocab import MAX_TIMEOUT_S

_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")
_MAX_RANKS = 64
_NUM = ((int, float), "number of seconds")

_SERVER_KEYS: dict[str, tuple[tuple[type, ...], str]] = {
    "name": ((str,), 'string of letters, digits, ".", "_" or "-" (e.g. "tinyav-tp1")'),
    "command": ((list,), 'list of strings (may hold "{port}" and "{python}")'),
    "env": ((dict,), "table of strings"),
    "ranks": ((int,), "integer"),
    "ready_url": ((str,), 'string, a path on the server such as "/health"'),
    "ready_log": ((str,), "string, a regular expression"),
    "ready_timeout_s": _NUM,
    "request_timeout_s": _NUM,
    "stop_timeout_s": _NUM,
}
_REQUEST_KEYS: dict[str, tuple[tuple[type, ...], str]] = {
    "path": ((str,), 'string, a path such as "/v1/videos/generations"'),
    "json": ((dict,), "table (the request's JSON body)"),
    "outputs": ((dict,), "table of name = { field, decode, suffix }"),
}
_OUTPUT_KEYS: dict[str, tuple[tuple[type, ...], str]] = {
    "field": ((str,), 'string, a dotted path in the answer such as "video.b64"'),
    "decode": ((str,), " or ".join(f'"{d}"' for d in DECODES)),
    "suffix": ((str,), 'string, a file suffix such as ".mp4"'),
    "kind": ((str,), " or ".join(f'"{k}"' for k in OUTPUT_KINDS)),
    "meta": ((dict,), 'table such as { sample_rate = "audio.sample_rate" }'),
}
_DEFAULT_SUFFIX = {"base64": ".bin", "text": ".txt", "json": ".json"}


def _check_keys(
    ctx: Ctx, key: str, raw: dict[str, Any], spec: dict[str, tuple[tuple[type, ...], str]]
) -> None:
    """:func:`check_keys` on a sub-table, its keys named from the case (``server.env``)."""
    check_keys(
        ctx, {f"{key}.{k}": v for k, v in raw.items()}, {f"{key}.{k}": v for k, v in spec.items()}
    )


def _seconds(ctx: Ctx, key: str, value: Any, highest: float) -> float:
    if not 0 < value <= highest:
        raise ctx.fail(key, value, f"a positive number of seconds, at most {highest:g}")
    return float(value)


def _path(ctx: Ctx, key: str, value: str) -> str:
    if not value.startswith("/") or any(c.isspace() for c in value):
        raise ctx.fail(key, value, 'a path on the server starting with "/" (e.g. "/health")')
    return value


def parse_server(ctx: Ctx, raw: Any) -> ServerSpec:
    """The ``[case.server]`` table."""
    if not isinstance(raw, dict):
        raise ctx.fail("server", raw, "a table [case.server]")
    _check_keys(ctx, "server", raw, _SERVER_KEYS)
    if "command" not in raw:
        raise CaseFileError(ctx.path, f"{ctx.where}: [case.server] is missing 'command'")
    command = str_list(ctx, "server.command", raw["command"])
    if not command:
        raise ctx.fail("server.command", raw["command"], "a non-empty list of strings")
    env = raw.get("env", {})
    bad = {k: v for k, v in env.items() if not isinstance(v, str)}
    if bad:
        raise ctx.fail("server.env", bad, "a table of strings (quote numbers)")
    if "ready_url" not in raw and "ready_log" not in raw:
        raise CaseFileError(
            ctx.path,
            f"{ctx.where}: [case.server] needs 'ready_url' (a path answering 200 when ready, "
            "e.g. \"/health\") or 'ready_log' (a regex the server prints when ready), or both",
        )
    ready_url = _path(ctx, "server.ready_url", raw["ready_url"]) if "ready_url" in raw else None
    ready_log = raw.get("ready_log")
    if ready_log is not None:
        try:
            re.compile(ready_log)
        except re.error as e:
            raise ctx.fail(
                "server.ready_log", ready_log, f"a valid regular expression ({e})"
            ) from None
    name = raw.get("name")
    if name is not None and not _NAME.fullmatch(name):
        raise ctx.fail("server.name", name, 'letters, digits, ".", "_" or "-" (e.g. "tinyav-tp1")')
    ranks = raw.get("ranks", 1)
    if not 1 <= ranks <= _MAX_RANKS:
        raise ctx.fail("server.ranks", ranks, f"an integer from 1 to {_MAX_RANKS}")
    return ServerSpec(
        command=command,
        env=dict(env),
        ranks=ranks,
        ready_url=ready_url,
        ready_log=ready_log,
        ready_timeout_s=_seconds(
            ctx, "server.ready_timeout_s", raw.get("ready_timeout_s", 600.0), MAX_TIMEOUT_S
        ),
        request_timeout_s=_seconds(
            ctx, "server.request_timeout_s", raw.get("request_timeout_s", 300.0), MAX_TIMEOUT_S
        ),
        stop_timeout_s=_seconds(ctx, "server.stop_timeout_s", raw.get("stop_timeout_s", 10.0), 600),
        name=name,
    )


def _output(ctx: Ctx, key: str, raw: Any) -> OutputSpec:
    if not isinstance(raw, dict):
        raise ctx.fail(key, raw, 'a table such as { field = "video.b64", suffix = ".mp4" }')
    _check_keys(ctx, key, raw, _OUTPUT_KEYS)
    if "field" not in raw:
        raise CaseFileError(
            ctx.path, f"{ctx.where}: {key} is missing 'field' (where the output is in the answer)"
        )
    if not raw["field"] or "" in raw["field"].split("."):
        raise ctx.fail(f"{key}.field", raw["field"], 'a dotted path such as "video.b64"')
    decode = raw.get("decode", "base64")
    if decode not in DECODES:
        raise ctx.fail(f"{key}.decode", decode, "one of " + ", ".join(DECODES))
    suffix = raw.get("suffix", _DEFAULT_SUFFIX[decode])
    if not re.fullmatch(r"\.[A-Za-z0-9]+", suffix):
        raise ctx.fail(f"{key}.suffix", suffix, 'one file suffix with its dot, such as ".mp4"')
    kind = raw.get("kind", SUFFIX_KINDS.get(suffix.lower(), "file"))
    if kind not in OUTPUT_KINDS:
        raise ctx.fail(f"{key}.kind", kind, "one of " + ", ".join(OUTPUT_KINDS))
    meta = raw.get("meta", {})
    for name, value in meta.items():
        if name in ("kind", "encoded_from"):
            raise ctx.fail(f"{key}.meta", name, "meta names other than 'kind' and 'encoded_from'")
        if not type_ok(value, (str, int, float)) or not finite(value) or value == "":
            raise ctx.fail(
                f"{key}.meta.{name}",
                value,
                'a dotted field of the answer (e.g. "audio.sample_rate") or a finite number',
            )
    return OutputSpec(field=raw["field"], decode=decode, suffix=suffix, kind=kind, meta=dict(meta))


def parse_request(ctx: Ctx, index: int, raw: Any) -> RequestSpec:
    """One ``[[case.requests]]`` table."""
    key = f"requests[{index}]"
    if not isinstance(raw, dict):
        raise ctx.fail(key, raw, "a table [[case.requests]]")
    _check_keys(ctx, key, raw, _REQUEST_KEYS)
    if "path" not in raw:
        raise CaseFileError(ctx.path, f"{ctx.where}: {key} is missing 'path'")
    path = _path(ctx, f"{key}.path", raw["path"])
    body = raw.get("json", {})
    check_json(ctx, f"{key}.json", body)
    outputs = {}
    for name, spec in raw.get("outputs", {}).items():
        if not _NAME.fullmatch(name):
            raise ctx.fail(
                f"{key}.outputs", name, "output names of letters, digits, '.', '_' or '-'"
            )
        outputs[name] = _output(ctx, f"{key}.outputs.{name}", spec)
    return RequestSpec(path=path, json=dict(body), outputs=outputs)


def parse_requests(ctx: Ctx, raw: Any) -> tuple[RequestSpec, ...]:
    if not type_ok(raw, (list,)):
        raise ctx.fail("requests", raw, "an array of tables [[case.requests]]")
    return tuple(parse_request(ctx, i, r) for i, r in enumerate(raw))
