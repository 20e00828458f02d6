"""A server case's answers recorded on the worker's output thread (``server_answers.Outputs``):
in request order, the thread gone when the requests are done, a missing field failing its
request at once, and an error while recording raised at the end as the loop would have."""

from __future__ import annotations

import base64
import threading
from pathlib import Path
from typing import Any

import pytest

from harness import probe
from harness.model.server import OutputSpec, RequestSpec
from harness.worker.case_errors import ServerError
from harness.worker.server_answers import Outputs

REQ = RequestSpec(
    path="/v1/generate",
    outputs={"text": OutputSpec(field="result.b64", suffix=".txt")},
)


def answer(text: str) -> dict[str, Any]:
    return {"result": {"b64": base64.b64encode(text.encode()).decode()}}


def test_answers_are_recorded_in_order_and_the_thread_ends(tmp_path: Path) -> None:
    rec = probe._begin(seed=1, platform="cpu", output_dir=tmp_path)
    try:
        outputs = Outputs()
        for i in range(3):
            outputs.take(i, REQ, answer(f"answer {i}"), f"r{i}.")
        outputs.finish()
    finally:
        probe._end()
    assert list(rec.outputs) == ["r0.text", "r1.text", "r2.text"]
    assert [(tmp_path / f"r{i}.text.txt").read_text() for i in range(3)] == [
        f"answer {i}" for i in range(3)
    ]
    assert not [t for t in threading.enumerate() if t.name.startswith("harness-outputs")]


def test_a_missing_field_fails_its_request_at_once(tmp_path: Path) -> None:
    probe._begin(seed=1, platform="cpu", output_dir=tmp_path)
    outputs = Outputs()
    try:
        with pytest.raises(ServerError, match=r"request #1 .* output 'text' .*'result\.b64'"):
            outputs.take(1, REQ, {"other": 1}, "")
    finally:
        outputs.finish(errors=False)
        probe._end()


def test_an_error_while_recording_is_raised_when_the_requests_are_done(tmp_path: Path) -> None:
    probe._begin(seed=1, platform="cpu", output_dir=tmp_path)
    try:
        outputs = Outputs()
        outputs.take(0, REQ, answer("first"), "")
        outputs.take(1, REQ, answer("second"), "")  # the same output name: refused
        with pytest.raises(ValueError, match="text"):
            outputs.finish()
    finally:
        probe._end()
