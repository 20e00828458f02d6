"""Loading ``kind = "server"`` cases: the schema as built, and one clear line per mistake naming
the file, the case and the key."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.cases.load import load_file
from harness.errors import CaseFileError
from harness.model import KINDS, case_from_json, case_to_json

GOOD = """
[[case]]
id = "srv"
kind = "server"
{case_extra}

[case.server]
command = ["{{python}}", "-m", "tinyav.serve", "--port", "{{port}}"]
{server_extra}

[[case.requests]]
path = "/v1/videos/generations"
json = {{ prompt = "a fox", steps = 2 }}
outputs.video = {{ field = "video.b64", suffix = ".mp4" }}
{request_extra}
"""


def write(tmp_path: Path, server_extra: str = 'ready_url = "/health"', **kw: str) -> Path:
    path = tmp_path / "srv.toml"
    text = GOOD.format(
        case_extra=kw.get("case_extra", ""),
        server_extra=server_extra,
        request_extra=kw.get("request_extra", ""),
    )
    path.write_text(text)
    return path


def error(path: Path) -> str:
    with pytest.raises(CaseFileError) as info:
        load_file(path)
    message = str(info.value)
    assert "\n" not in message, message
    assert str(path) in message, message
    return message


def test_a_server_case_loads_with_its_defaults_and_survives_the_worker_protocol(
    tmp_path: Path,
) -> None:
    (case,) = load_file(write(tmp_path))
    assert case.kind == "server" and case.target is None and case.command is None
    server = case.server
    assert server is not None
    assert server.command[1:] == ("-m", "tinyav.serve", "--port", "{port}")
    assert (server.ranks, server.ready_url, server.ready_log) == (1, "/health", None)
    assert (server.ready_timeout_s, server.request_timeout_s, server.stop_timeout_s) == (
        600.0,
        300.0,
        10.0,
    )
    (req,) = case.requests
    video = req.outputs["video"]
    assert (video.field, video.decode, video.suffix, video.kind) == (
        "video.b64",
        "base64",
        ".mp4",
        "video",
    )
    # the attempt's limit covers start-up, one request, the stop and a margin
    assert case.timeout_s == 600 + 300 + 10 + 30
    assert case_from_json(json.loads(json.dumps(case_to_json(case)))) == case


def test_the_bundled_server_case_loads() -> None:
    root = Path(__file__).resolve().parents[2]
    (case,) = load_file(root / "cases" / "server" / "tinyav.toml")
    assert case.server is not None and case.server.ready_url == "/health"
    assert set(case.requests[0].outputs) == {"video", "audio"}


def test_a_server_case_without_its_server_table(tmp_path: Path) -> None:
    path = tmp_path / "srv.toml"
    path.write_text('id = "srv"\nkind = "server"\n')
    message = error(path)
    assert "case 'srv'" in message and "[case.server]" in message


def test_neither_ready_url_nor_ready_log(tmp_path: Path) -> None:
    message = error(write(tmp_path, server_extra=""))
    assert "case 'srv'" in message and "'ready_url'" in message and "'ready_log'" in message


@pytest.mark.parametrize(
    ("request_extra", "key", "expected"),
    [
        ('outputs.audio = { suffix = ".wav" }', "requests[0].outputs.audio", "'field'"),
        (
            'outputs.audio = { field = "audio.b64", decode = "hex" }',
            "requests[0].outputs.audio.decode",
            "base64, text, json",
        ),
        (
            'outputs.audio = { field = "audio.b64", suffix = "wav" }',
            "requests[0].outputs.audio.suffix",
            "suffix with its dot",
        ),
        ('outputs.audio = "audio.b64"', "requests[0].outputs.audio", "a table"),
        (
            'outputs.audio = { field = "audio.b64", meta = { sample_rate = true } }',
            "requests[0].outputs.audio.meta.sample_rate",
            "a dotted field of the answer",
        ),
        (
            'outputs.audio = { field = "audio.b64", colour = "red" }',
            "requests[0].outputs.audio.colour",
            "known keys",
        ),
    ],
)
def test_a_bad_outputs_spec(tmp_path: Path, request_extra: str, key: str, expected: str) -> None:
    message = error(write(tmp_path, request_extra=request_extra))
    assert "case 'srv'" in message and key in message and expected in message


@pytest.mark.parametrize(
    ("server_extra", "key"),
    [
        ('ready_url = "health"', "server.ready_url"),
        ('ready_log = "ready ("', "server.ready_log"),
        ('ready_url = "/health"\nranks = 0', "server.ranks"),
        ('ready_url = "/health"\nenv = { N = 1 }', "server.env"),
        ('ready_url = "/health"\nready_timeout_s = -1', "server.ready_timeout_s"),
        ('ready_url = "/health"\nport = 80', "server.port"),
        ('ready_url = "/health"\nname = "tiny av"', "server.name"),
    ],
)
def test_a_bad_server_key(tmp_path: Path, server_extra: str, key: str) -> None:
    message = error(write(tmp_path, server_extra=server_extra))
    assert "case 'srv'" in message and key in message


def test_a_limit_shorter_than_the_start_up_it_must_cover(tmp_path: Path) -> None:
    message = error(write(tmp_path, case_extra="timeout_s = 60"))
    assert "timeout_s" in message and "ready_timeout_s (600)" in message


def test_server_keys_on_another_kind_and_a_target_on_a_server_case(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text(
        'id = "p"\nkind = "pipeline"\ntarget = "m:f"\n[server]\ncommand = ["x"]\nready_url = "/h"\n'
    )
    assert 'kind = "server"' in error(path)
    message = error(write(tmp_path, case_extra='target = "m:f"'))
    assert "[case.server]" in message and "'target'" in message


def test_the_report_schema_knows_every_kind() -> None:
    root = Path(__file__).resolve().parents[2]
    schema = json.loads((root / "harness/report/schemas/report.schema.json").read_text())
    enums: list[list[str]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            kind = node.get("properties", {}).get("kind")
            if isinstance(kind, dict) and "pipeline" in kind.get("enum", ()):
                enums.append(kind["enum"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    assert enums and all(tuple(e) == KINDS for e in enums), enums
