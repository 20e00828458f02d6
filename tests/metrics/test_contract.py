"""The metric contract: registry, result records and their JSON round trip, finiteness, and
the import-light promise."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from harness import metrics
from harness.metrics import MetricResult

EXPECTED = (
    "ssim",
    "psnr",
    "mae",
    "max_abs",
    "clip",
    "audio_snr",
    "audio_mad",
    "audio_lsd",
    "audio_lag_ms",
)


def test_registry_names_and_classes() -> None:
    assert metrics.names() == EXPECTED
    for name in EXPECTED:
        cls = metrics.get(name)
        assert cls.name == name
        assert isinstance(cls.higher_is_better, bool)
        assert isinstance(cls.unit, str)
        assert cls.__doc__


def test_unknown_metric_names_the_value_and_choices() -> None:
    with pytest.raises(metrics.UnknownMetricError, match=r"'sssim'.*ssim, psnr"):
        metrics.get("sssim")


def test_result_json_round_trip_with_inf() -> None:
    r = MetricResult(
        name="psnr",
        value=math.inf,
        unit="dB",
        higher_is_better=True,
        per_frame=(math.inf, 41.5),
        settings={"data_range": 255.0, "reduce": "worst"},
    )
    text = json.dumps(r.to_dict())
    assert "Infinity" in text
    assert MetricResult.from_dict(json.loads(text)) == r
    # A writer that turns inf into the string "inf" reads back the same.
    as_strings = {**r.to_dict(), "value": "inf", "per_frame": ["inf", 41.5]}
    assert MetricResult.from_dict(json.loads(json.dumps(as_strings))) == r


def test_not_run_result_round_trip() -> None:
    r = MetricResult(
        name="clip",
        value=None,
        unit="cosine",
        higher_is_better=True,
        status="not_run",
        skipped_reason="no model",
    )
    assert MetricResult.from_dict(json.loads(json.dumps(r.to_dict()))) == r


def test_aggregate_directions() -> None:
    v = np.array([0.9, 0.5, 0.7])
    assert metrics.aggregate(v, higher_is_better=True, reduce="worst") == 0.5
    assert metrics.aggregate(v, higher_is_better=False, reduce="worst") == 0.9
    assert metrics.aggregate(v, higher_is_better=True, reduce="mean") == pytest.approx(0.7)
    assert math.isnan(
        metrics.aggregate(np.array([1.0, np.nan]), higher_is_better=True, reduce="worst")
    )
    with pytest.raises(ValueError, match="reduce"):
        metrics.SSIM(reduce="median")  # type: ignore[arg-type]


def test_count_nonfinite_numpy_and_torch() -> None:
    a = np.array([1.0, np.nan, np.inf, -np.inf, 0.0], np.float32)
    assert metrics.count_nonfinite(a) == 3
    assert metrics.count_nonfinite(torch.from_numpy(a)) == 3
    assert metrics.count_nonfinite(torch.from_numpy(a).to(torch.bfloat16)) == 3
    assert metrics.count_nonfinite(np.arange(5)) == 0
    assert metrics.count_nonfinite(torch.arange(5)) == 0
    assert metrics.count_nonfinite([1.0, float("nan")]) == 1
    assert metrics.count_nonfinite(np.zeros((0, 3))) == 0


def test_import_is_light() -> None:
    code = (
        "import sys, harness.metrics, harness.media\n"
        "heavy = [m for m in ('torch', 'transformers', 'skimage', 'scipy') if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "", f"heavy modules imported eagerly: {out.stdout}"
