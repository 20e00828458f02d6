"""End to end through the CLI: a run is blessed with its layers; head's denoiser then drifts
after step 0, and the run's reports name denoise.step01 as its first departure from the
layered reference, with every input identical.

The target is a small numpy "pipeline" (a prompt and a noise input, a text context, a denoise
loop fingerprinting each step, a decoded video) so that two real runs and a bless cost a few
seconds: the planted change is a line of the target's code, as a head commit would make it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harness.cli import main
from harness.report.schema import validate_report

TARGET = """
import numpy as np
from harness import probe

DRIFT = {drift}  # planted by the test: head's denoiser drifts after step 0


def t2v(prompt: str = "a red fox", steps: int = 4) -> None:
    probe.record_input("prompt", prompt)
    codes = np.frombuffer(prompt.encode(), dtype=np.uint8).astype(np.float32)
    context = np.resize(codes / 255.0, 32).astype(np.float32)  # 32 values: kept whole
    probe.fingerprint("text.context", context)
    noise = np.random.default_rng(7).standard_normal((4, 16, 16)).astype(np.float32)
    probe.record_input("noise", noise)
    latents = noise.copy()  # 1024 values: kept as a 256-value sample
    for i in range(steps):
        velocity = np.tanh(latents + context.mean()) * (1.0 + (DRIFT if i >= 1 else 0.0))
        latents = latents - 0.2 * velocity
        probe.fingerprint(f"denoise.step{{i:02d}}", latents)
    up = np.repeat(np.repeat(latents, 2, axis=1), 2, axis=2)
    frames = np.clip(128 + 60 * up, 0, 255).astype(np.uint8)
    video = np.stack([frames, frames[::-1], frames, frames[::-1]], axis=-1)[..., :3]
    probe.output("video", np.ascontiguousarray(video), kind="video", fps=8)
"""

CASE = """
id = "drift"
kind = "pipeline"
target = "layers_e2e_target:t2v"
reference = "drift"
frames = "all"

[[checks]]
metric = "mae"
output = "video"
op = "<="
threshold = 0.5
"""


def _attempt(run: Path) -> dict:
    report = json.loads((run / "report.json").read_text())
    return report["cases"][0]["attempts"][-1]


@pytest.mark.slow
def test_drift_after_step0_is_localized(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, cases, refs, out = (tmp_path / d for d in ("code", "cases", "refs", "reports"))
    for d in (code, cases, refs):
        d.mkdir()
    (cases / "drift.toml").write_text(CASE)

    def run(run_id: str, drift: float, *extra: str) -> tuple[int, Path]:
        (code / "layers_e2e_target.py").write_text(TARGET.format(drift=drift))
        argv = ["run", str(cases), "--code-root", str(code), "--out", str(out)]
        rc = main([*argv, "--run-id", run_id, "--references", str(refs), "-q", *extra])
        return rc, out / run_id

    rc, base = run("base", 0.0)
    assert rc == 1  # no reference yet
    assert _attempt(base)["intermediates"]["count"] == 5  # text.context, denoise.step00..03
    capsys.readouterr()
    # A run folder whose layer samples changed after the run is never pinned.
    tampered = tmp_path / "tampered"
    shutil.copytree(base, tampered)
    samples = tampered / _attempt(base)["intermediates"]["path"]
    samples.write_bytes(samples.read_bytes()[:-4] + b"\0\0\0\0")
    assert (
        main(["refs", "bless", "--run", str(tampered), "--references", str(refs), "--reason", "x"])
        == 2
    )
    assert "changed after the run" in capsys.readouterr().out
    assert not (refs / "manifest.json").exists()

    blessed = ["refs", "bless", "--run", str(base), "--references", str(refs)]
    assert main([*blessed, "--reason", "first", "--who", "ci"]) == 0
    said = capsys.readouterr().out
    assert "layers drift/any: 2 input hashes, 5 fingerprinted layers (1 whole, 4 sampled)" in said
    assert main(["refs", "verify", "--references", str(refs)]) == 0

    # The same code with --explain: every layer identical, and the run passes.
    rc, same = run("same", 0.0, "--explain")
    assert rc == 0
    layers = _attempt(same)["reference_layers"]
    assert layers["status"] == "identical" and layers["first_departure"] is None

    rc, head = run("head", 0.05)  # no --explain: the failed quality check asks for it
    assert rc == 1
    validate_report(json.loads((head / "report.json").read_text()))  # the published schema
    err = capsys.readouterr().err
    layers = _attempt(head)["reference_layers"]
    assert layers["status"] == "departed"
    assert layers["first_departure"] == "denoise.step01"
    by_name = {x["name"]: x for x in layers["layers"]}
    assert [x["name"] for x in layers["layers"][:2]] == ["prompt", "noise"]
    assert {by_name[n]["status"] for n in ("prompt", "noise", "text.context")} == {"identical"}
    assert by_name["denoise.step00"]["status"] == "identical"
    step1 = by_name["denoise.step01"]
    assert step1["status"] == "departed" and step1["tolerance"] == 1e-3  # cpu policy
    assert 1e-3 < step1["value"] < 0.1 and "sampled" in step1["detail"]
    summary = layers["summary"]
    assert summary.startswith("inputs identical (2 hashes); 2 layers identical (text.context ..")
    assert "denoise.step01 rel L2" in summary and "> 1e-3" in summary
    assert "first departure; 2 later layers departed" in summary
    # Every report format says it.
    assert f"layers   pipeline/drift[cpu]: {summary}" in err
    assert summary.replace(">", "\\>") in (head / "summary.md").read_text()  # Markdown-escaped
    assert "denoise.step01" in (head / "junit.xml").read_text()
    html = (head / "index.html").read_text()
    assert "first departure" in html and "denoise.step02" in html

    # The same head on a simulated HIP platform, against the CPU-blessed reference: HIP's
    # policy tolerance (1e-2, harness/platforms/policy.toml [hip.layers]) takes step01's
    # 7.6e-3 as within, and the departure is localized at step02.
    rc, hip = run("hip", 0.05, "--platform", "hip")
    layers = _attempt(hip)["reference_layers"]
    assert layers["first_departure"] == "denoise.step02", layers["summary"]
    by_name = {x["name"]: x for x in layers["layers"]}
    assert by_name["denoise.step01"]["status"] == "within"
    assert by_name["denoise.step01"]["tolerance"] == 1e-2
    assert "denoise.step01 within tolerance (rel L2 7.6e-3 <= 1e-2)" in layers["summary"]
