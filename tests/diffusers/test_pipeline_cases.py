"""The diffusers pipeline cases against their blessed references: the cases as committed pass
(as the bundled suite's one run ran them, tests/conftest.py), and the same cases with the
scheduler's shift changed fail their quality checks (one more run of just those, real workers,
the committed references read-only)."""

from __future__ import annotations

import hashlib
import tomllib
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, by_id, harness, report
from diffcases import require_diffusers, suite_cases

from harness.model.vocab import number_from_json

require_diffusers("the diffusers extra is not installed")
pytestmark = pytest.mark.slow

CASES = REPO / "cases" / "diffusers" / "pipeline.toml"
# (case id, committed shift, changed shift): shifts a config edit could plausibly introduce
SHIFTED = {"diffusers-ltx2-t2va": (1.0, 2.0), "diffusers-wan-t2v": (3.0, 6.0)}


def shifted_copy(dest: Path) -> Path:
    """The committed case file's cases as ``<id>-shifted``, with the scheduler's shift changed
    (same reference, same checks)."""
    text = CASES.read_text()
    blocks = text.split("[[case]]")
    out = [blocks[0]]
    for block in blocks[1:]:
        case_id = tomllib.loads(block)["id"]
        old, new = SHIFTED[case_id]
        changed = block.replace(f'id = "{case_id}"', f'id = "{case_id}-shifted"')
        assert f"shift = {old}" in changed, case_id
        out.append("[[case]]" + changed.replace(f"shift = {old}", f"shift = {new}"))
    dest.write_text("\n".join(out))
    return dest


def store_digest() -> str:
    h = hashlib.sha256()
    for p in sorted((REPO / "references").rglob("*")):
        if p.is_file():
            h.update(str(p).encode() + p.read_bytes())
    return h.hexdigest()


@pytest.mark.xdist_group("bundled-suite")
def test_committed_cases_pass_and_a_changed_shift_fails_the_quality_checks(
    tmp_path: Path, bundled_suite: Any
) -> None:
    assert bundled_suite.returncode == 0, bundled_suite.output[-3000:]
    assert bundled_suite.references_after == bundled_suite.references_before
    committed = suite_cases(bundled_suite, CASES)
    assert set(committed) == set(SHIFTED)
    before = store_digest()
    cases = shifted_copy(tmp_path / "pipeline.toml")
    proc = harness("run", str(cases), "--out", str(tmp_path), "--run-id", "r", "-q")
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert store_digest() == before  # a run never writes references
    got = by_id(report(tmp_path / "r"))
    assert set(got) == {f"{case_id}-shifted" for case_id in SHIFTED}
    for case_id in SHIFTED:
        ok, bad = committed[case_id], got[f"{case_id}-shifted"]
        assert ok["status"] == "passed", ok["reason"]
        checks = {c["name"]: c for c in ok["checks"]}
        assert checks["identical_outputs"]["passed"] is True
        # bit-identical to the reference ("inf") on a runner whose CPU gives torch the kernels
        # of the one that blessed it; 83 dB on an AVX-512 runner (2026-12-04); the shifted
        # copy below fails its threshold
        assert number_from_json(checks["psnr(video)"]["value"]) > 60
        assert bad["status"] == "failed", bad["reason"]
        failed = {c["name"] for c in bad["checks"] if c["passed"] is False}
        assert {"ssim(video)", "psnr(video)", "mae(video)"} <= failed, failed
        if "ltx2" in case_id:
            assert {"audio_snr(audio)", "audio_lsd(audio)"} <= failed, failed
        # Same noise and prompt, so the inputs agree; the first step's latents already differ.
        a, b = ok["attempts"][0], bad["attempts"][0]
        assert a["inputs"] == b["inputs"]
        assert a["fingerprints"]["text.hidden.0"] == b["fingerprints"]["text.hidden.0"]
        assert (
            a["fingerprints"]["denoise.step00"]["hash"]
            != b["fingerprints"]["denoise.step00"]["hash"]
        )
        assert a["notes"]["scheduler.sigmas"] != b["notes"]["scheduler.sigmas"]
