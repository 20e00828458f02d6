"""Case files: TOML in, validated frozen :class:`Case` records out.

A file holds one case (top-level keys) or several (``[[case]]`` tables). Every problem is an
error that names the file, the case, the key, the value and what was expected; unknown keys are
errors; ids are unique across the suite, and a duplicate names both files.

Values are checked for what the run will do with them, so that none that loads can crash the
run or make a check pass that could never fail: ids and reference ids are one safe path segment;
``platforms`` and ``thresholds`` keys are known platform names; a check's metric is known and its
threshold has the type its metric and op need; ``params`` and ``settings`` survive the worker
protocol's JSON unchanged (no dates, no NaN or infinity); ``repeats`` <= 1000, ``warmup`` <= 100,
``retries`` <= 10, ``timeout_s`` at most 24 h and every number finite.

Example::

    [[case]]
    id = "t2va-int8"
    kind = "pipeline"
    target = "tinyav.scenarios.pipeline:t2va"
    params = { quant = "int8", steps = 4 }
    seed = 42
    repeats = 2

    [[case.checks]]
    metric = "ssim"
    output = "video"
    op = ">="
    threshold = 0.98
    thresholds = { hip = 0.95, "hip:gfx950" = 0.97 }

    [[case.checks]]                 # what executed: needs the real device
    metric = "note.dispatch.int8_mm.ran"
    op = "=="
    threshold = "dequant_matmul"
    thresholds = { cuda = "dequant_matmul,int_mm" }
    needs_device = true

A check with ``needs_device = true`` asserts what ran on the hardware: on a simulated platform
it is *not run: simulated* (with the reason) and does not block the case; checks on decisions
run everywhere. ``thresholds`` keys are platforms or ``platform:arch``.
"""

from __future__ import annotations

import keyword
import math
import re
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from harness.cases.checks import parse_check
from harness.cases.fields import (
    Ctx,
    check_json,
    check_keys,
    parse_frames,
    str_list,
    type_ok,
)
from harness.cases.lines import case_lines
from harness.cases.ranks import parse_ranks
from harness.cases.server import parse_requests, parse_server
from harness.errors import CaseFileError
from harness.model.case import Case
from harness.model.server import RequestSpec, ServerSpec
from harness.model.vocab import (
    KINDS,
    MAX_REPEATS,
    MAX_RETRIES,
    MAX_TIMEOUT_S,
    MAX_WARMUP,
    PLATFORMS,
)

# Ids name files and folders (outputs, references): one path segment, never hidden, never
# "." or "..", so no two ids share a file and none resolves outside its store.
_ID = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")
_ID_EXPECTED = "letters, digits, '.', '_' or '-', not starting with '.'"
_COUNTS = {"repeats": (1, MAX_REPEATS), "warmup": (0, MAX_WARMUP), "retries": (0, MAX_RETRIES)}


# key -> (expected type(s), human name of the type)
_CASE_KEYS: dict[str, tuple[tuple[type, ...], str]] = {
    "id": ((str,), "string"),
    "kind": ((str,), "string"),
    "target": ((str,), 'string "module:function"'),
    "command": ((list,), "list of strings"),
    "params": ((dict,), "table"),
    "seed": ((int,), "integer"),
    "platforms": ((list, str), 'list of strings or "any"'),
    "repeats": ((int,), "integer"),
    "retries": ((int,), "integer"),
    "warmup": ((int,), "integer"),
    "timeout_s": ((int, float), "number"),
    "fresh_process": ((bool,), "boolean"),
    "checks": ((list,), "array of tables"),
    "reference": ((str,), "string"),
    "frames": ((str, list), '"first-mid-last", "all" or a list of integers'),
    "budget": ((dict,), "table of stage = seconds"),
    "description": ((str,), "string"),
    "tags": ((list,), "list of strings"),
    "code_root": ((str,), "string (a folder relative to the repository root)"),
    "requires": ((list,), "list of module names"),
    "coverage_packages": ((list,), "list of package names"),
    "known_flaky": ((str,), "string (why the case is known to fail intermittently)"),
    "server": ((dict,), 'table [case.server] (kind = "server")'),
    "requests": ((list,), 'array of tables [[case.requests]] (kind = "server")'),
    "ranks": ((int,), "positive integer (processes, one per rank)"),
    "replicated": ((list,), 'list of fingerprint names or patterns such as "denoise.*"'),
}


def _is_name(text: str) -> bool:
    return text.isidentifier() and not keyword.iskeyword(text)


def _target_ok(target: str) -> bool:
    """``module.path:function``: the worker imports the module and takes the attribute."""
    module, colon, function = target.partition(":")
    return bool(colon) and all(map(_is_name, module.split("."))) and _is_name(function)


def _code_root(ctx: Ctx, value: str) -> str:
    """A relative folder inside the repository: no absolute path, no '..', no backslash."""
    parts = value.removesuffix("/").split("/")
    if not value or value.startswith("/") or "\\" in value or ".." in parts or "" in parts:
        raise ctx.fail(
            "code_root",
            value,
            "a folder relative to the repository root, with '/' separators and no '..' "
            '(e.g. "targets/diffusers_scenarios")',
        )
    return "/".join(p for p in parts if p != ".") or "."


def _known_flaky(ctx: Ctx, value: str) -> str:
    if not value.strip():
        raise ctx.fail(
            "known_flaky", value, "a non-empty reason (e.g. an issue link) why it is flaky"
        )
    return value.strip()


def _requires(ctx: Ctx, value: list[Any], key: str = "requires") -> tuple[str, ...]:
    names = str_list(ctx, key, value)
    bad = [n for n in names if not all(map(_is_name, n.split(".")))]
    if bad:
        raise ctx.fail(key, value, f"importable module names (dotted); not names: {bad}")
    return names


def parse_case(path: Path, raw: Any, where: str, line: int = 0) -> Case:
    """Validate one case table; ``where`` says which table of the file it is, ``line`` the line
    its table starts on (0: not known)."""
    if not isinstance(raw, dict):
        raise CaseFileError(path, f"{where}: expected a table, got {type(raw).__name__}")
    if isinstance(raw.get("id"), str):
        where = f"{where} (case '{raw['id']}')"
    ctx = Ctx(path, where)
    check_keys(ctx, raw, _CASE_KEYS)
    if "id" not in raw:
        raise CaseFileError(path, f"{where}: missing required key 'id'")
    ctx = Ctx(path, f"case '{raw['id']}'")
    if not _ID.fullmatch(raw["id"]):
        raise ctx.fail("id", raw["id"], f"a non-empty id of {_ID_EXPECTED}")
    if "kind" not in raw:
        raise CaseFileError(path, f"{ctx.where}: missing required key 'kind'")
    if raw["kind"] not in KINDS:
        raise ctx.fail("kind", raw["kind"], "one of " + ", ".join(KINDS))
    server, requests = _server_parts(ctx, raw)
    ranks, replicated = parse_ranks(ctx, raw)
    has_target, has_command = "target" in raw, "command" in raw
    if server is not None and (has_target or has_command):
        raise CaseFileError(
            path,
            f"{ctx.where}: a server case takes its command from [case.server]: remove "
            f"'{'target' if has_target else 'command'}'",
        )
    if server is None and has_target == has_command:
        raise CaseFileError(path, f"{ctx.where}: exactly one of 'target' or 'command' is required")
    if has_target and not _target_ok(raw["target"]):
        raise ctx.fail(
            "target",
            raw["target"],
            'a string "module:function" (dotted module path, function name)',
        )
    command = str_list(ctx, "command", raw["command"]) if has_command else None
    if command is not None and not command:
        raise ctx.fail("command", raw["command"], "a non-empty list of strings")
    platforms: tuple[str, ...] | Literal["any"] = "any"
    if "platforms" in raw:
        if isinstance(raw["platforms"], str):
            if raw["platforms"] != "any":
                raise ctx.fail("platforms", raw["platforms"], 'a list of strings or "any"')
        else:
            platforms = str_list(ctx, "platforms", raw["platforms"])
            if not platforms:
                raise ctx.fail("platforms", raw["platforms"], 'a non-empty list or "any"')
            unknown = [p for p in platforms if p not in PLATFORMS]
            if unknown:
                raise ctx.fail(
                    "platforms",
                    raw["platforms"],
                    f"known platform names ({', '.join(PLATFORMS)}); unknown: {unknown}",
                )
    for key, (lowest, highest) in _COUNTS.items():
        if key in raw and not lowest <= raw[key] <= highest:
            raise ctx.fail(key, raw[key], f"an integer from {lowest} to {highest}")
    timeout_s = float(raw.get("timeout_s", _server_timeout(server, requests)))
    if server is not None and timeout_s <= server.ready_timeout_s:
        raise ctx.fail(
            "timeout_s",
            timeout_s,
            f"more seconds than server.ready_timeout_s ({server.ready_timeout_s:g}): the "
            "attempt's limit covers start-up, the requests and the stop",
        )
    if "timeout_s" in raw and not 0 < raw["timeout_s"] <= MAX_TIMEOUT_S:
        raise ctx.fail(
            "timeout_s",
            raw["timeout_s"],
            f"a positive number of seconds, at most {MAX_TIMEOUT_S:g} (24 h)",
        )
    if "reference" in raw and not _ID.fullmatch(raw["reference"]):
        raise ctx.fail("reference", raw["reference"], f"a reference id of {_ID_EXPECTED}")
    check_json(ctx, "params", raw.get("params", {}))
    budget = raw.get("budget", {})
    for stage, secs in budget.items():
        if not type_ok(secs, (int, float)) or not 0 < secs < math.inf:
            raise ctx.fail(f"budget.{stage}", secs, "a finite positive number of seconds")
    checks = tuple(parse_check(ctx, i, c) for i, c in enumerate(raw.get("checks", [])))
    return Case(
        id=raw["id"],
        kind=raw["kind"],
        source=str(path),
        target=raw.get("target"),
        command=command,
        params=dict(raw.get("params", {})),
        seed=raw.get("seed", 0),
        platforms=platforms,
        repeats=raw.get("repeats", 1),
        retries=raw.get("retries"),
        warmup=raw.get("warmup", 0),
        timeout_s=timeout_s,
        fresh_process=raw.get("fresh_process", False),
        checks=checks,
        reference=raw.get("reference"),
        frames=parse_frames(ctx, "frames", raw["frames"]) if "frames" in raw else "first-mid-last",
        budget={k: float(v) for k, v in budget.items()},
        description=raw.get("description", ""),
        tags=str_list(ctx, "tags", raw["tags"]) if "tags" in raw else (),
        code_root=_code_root(ctx, raw["code_root"]) if "code_root" in raw else None,
        requires=_requires(ctx, raw["requires"]) if "requires" in raw else (),
        coverage_packages=_requires(ctx, raw["coverage_packages"], "coverage_packages")
        if "coverage_packages" in raw
        else (),
        known_flaky=_known_flaky(ctx, raw["known_flaky"]) if "known_flaky" in raw else None,
        server=server,
        requests=requests,
        ranks=ranks,
        replicated=replicated,
        line=line,
    )


def _server_parts(
    ctx: Ctx, raw: dict[str, Any]
) -> tuple[ServerSpec | None, tuple[RequestSpec, ...]]:
    """The server table and requests of a ``kind = "server"`` case; none for other kinds."""
    if raw["kind"] != "server":
        extra = [k for k in ("server", "requests") if k in raw]
        if extra:
            raise CaseFileError(
                ctx.path,
                f"{ctx.where}: key '{extra[0]}' belongs to a server case: set kind = \"server\"",
            )
        return None, ()
    if "server" not in raw:
        raise CaseFileError(
            ctx.path,
            f'{ctx.where}: kind = "server" needs a [case.server] table (command, ready_url '
            "or ready_log)",
        )
    return parse_server(ctx, raw["server"]), parse_requests(ctx, raw.get("requests", []))


def _server_timeout(server: ServerSpec | None, requests: tuple[RequestSpec, ...]) -> float:
    """The default ``timeout_s``: 300 s, or for a server case its start-up, requests and stop
    limits together plus 30 s (capped at 24 h)."""
    if server is None:
        return 300.0
    total = server.ready_timeout_s + server.request_timeout_s * len(requests)
    return min(MAX_TIMEOUT_S, total + server.stop_timeout_s + 30.0)


def load_file(path: Path) -> list[Case]:
    """All cases in one TOML file, each with the line of its table (:func:`case_lines`)."""
    try:
        text = path.read_text(encoding="utf-8")
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise CaseFileError(path, f"not valid TOML: {exc}") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise CaseFileError(path, f"cannot read: {exc}") from exc
    lines = case_lines(text)
    return _parse_tables(path, data, lines)


def _parse_tables(path: Path, data: dict[str, Any], lines: dict[str, int]) -> list[Case]:
    if "case" in data:
        extra = sorted(set(data) - {"case"})
        if extra:
            raise CaseFileError(
                path, f"top-level keys {extra} next to [[case]]: put them inside a [[case]] table"
            )
        tables = data["case"]
        if not isinstance(tables, list):
            raise CaseFileError(path, "key 'case': expected an array of tables [[case]]")
        if not tables:
            raise CaseFileError(path, "no case in file: key 'case' is an empty array")
        return [
            parse_case(path, t, f"[[case]] #{i + 1}", _line_of(t, lines))
            for i, t in enumerate(tables)
        ]
    if not data:
        raise CaseFileError(path, "no case in file: expected top-level case keys or [[case]]")
    return [parse_case(path, data, "top level", _line_of(data, lines))]


def _line_of(raw: Any, lines: dict[str, int]) -> int:
    case_id = raw.get("id") if isinstance(raw, dict) else None
    return lines.get(case_id, 0) if isinstance(case_id, str) else 0


def discover(paths: Iterable[Path]) -> list[Path]:
    """Case files under the given files or folders, sorted for a deterministic order."""
    found: list[Path] = []
    for p in paths:
        if p.is_dir():
            found.extend(sorted(q for q in p.rglob("*.toml") if q.is_file()))
        elif p.is_file():
            found.append(p)
        else:
            raise CaseFileError(p, "no such file or folder")
    return found


@dataclass(frozen=True)
class LoadResult:
    """The cases that loaded, and the errors of the files that did not."""

    cases: tuple[Case, ...]
    errors: tuple[CaseFileError, ...]


def load_suite(paths: Iterable[Path]) -> LoadResult:
    """Load every case file; a bad file is an error for that file, the others still load."""
    cases: list[Case] = []
    errors: list[CaseFileError] = []
    seen: dict[str, str] = {}
    for path in discover(paths):
        try:
            file_cases = load_file(path)
        except CaseFileError as exc:
            errors.append(exc)
            continue
        for case in file_cases:
            if case.id in seen:
                errors.append(
                    CaseFileError(
                        path,
                        f"duplicate case id '{case.id}': already defined in {seen[case.id]}",
                    )
                )
                continue
            seen[case.id] = str(path)
            cases.append(case)
    return LoadResult(tuple(cases), tuple(errors))
