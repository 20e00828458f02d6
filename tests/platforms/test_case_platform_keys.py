"""Case-file keys for platforms: ``needs_device`` on a check (validated, carried to the worker),
``platform:arch`` threshold keys, and the simulated not-run record that never blocks a case."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cases import load_file
from harness.checks import evaluate_attempt_checks
from harness.errors import CaseFileError
from harness.model import case_from_json, case_to_json

HEAD = "[[case]]\nid = 'c'\nkind = 'quant'\ntarget = 'm:f'\n[[case.checks]]\n"


def write(tmp_path: Path, check: str) -> Path:
    path = tmp_path / "c.toml"
    path.write_text(HEAD + check + "\n")
    return path


def test_needs_device_and_arch_thresholds_load_and_cross_the_protocol(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        'metric = "note.ran"\nop = "=="\nthreshold = "cpu"\n'
        'thresholds = { hip = "hip", "hip:gfx950" = "hip-fn" }\nneeds_device = true',
    )
    [case] = load_file(path)
    [spec] = case.checks
    assert spec.needs_device is True
    assert spec.threshold_for(("mi355x", "hip:gfx950", "hip", "any")) == "hip-fn"
    assert spec.threshold_for(("mi300x", "hip:gfx942", "hip", "any")) == "hip"
    assert case_from_json(case_to_json(case)) == case


@pytest.mark.parametrize(
    ("check", "expected"),
    [
        (
            'metric = "note.ran"\nop = "=="\nthreshold = "x"\nneeds_device = "yes"',
            "key 'needs_device' = 'yes': expected boolean",
        ),
        (
            'metric = "ssim"\noutput = "v"\nop = ">="\nthreshold = 0.9\nneeds_device = true',
            "key 'needs_device' = True: expected false for 'ssim'",
        ),
        (
            'metric = "note.x"\nop = "=="\nthreshold = "x"\nthresholds = { "tpu:v5" = "y" }',
            "key 'thresholds.tpu:v5': unknown platform 'tpu'",
        ),
        (
            'metric = "note.x"\nop = "=="\nthreshold = "x"\nthresholds = { "hip:" = "y" }',
            "key 'thresholds.hip:': architecture ''",
        ),
    ],
)
def test_bad_platform_keys_name_the_file_and_the_key(
    tmp_path: Path, check: str, expected: str
) -> None:
    path = write(tmp_path, check)
    with pytest.raises(CaseFileError) as info:
        load_file(path)
    assert str(info.value).startswith(f"{path}: case 'c', checks[0]: "), info.value
    assert expected in str(info.value), info.value


def test_a_needs_device_check_is_not_run_when_simulated_and_runs_when_real(
    tmp_path: Path,
) -> None:
    path = write(
        tmp_path,
        'metric = "note.ran"\nop = "=="\nthreshold = "cpu"\nthresholds = { hip = "hip" }\n'
        "needs_device = true",
    )
    [case] = load_file(path)
    common: dict[str, object] = {
        "platform_chain": ("hip", "any"),
        "outputs": {},
        "arrays": {},
        "notes": {"ran": "cpu"},
        "references_root": None,
        "ran": True,
    }
    [sim] = evaluate_attempt_checks(case, simulated="simulated: hip is absent", **common)  # type: ignore[arg-type]
    assert sim.passed is None and sim.simulated and not sim.unjudged and not sim.blocking
    assert sim.reason == (
        "not run: simulated: hip is absent; this check asserts what ran on the device"
    )
    assert sim.settings == {"not_run": "simulated", "needs_device": True}
    [real] = evaluate_attempt_checks(case, **common)  # type: ignore[arg-type]
    assert real.passed is False and real.blocking  # real hip, yet it ran on the cpu: a failure
