"""Base-vs-base noise per case and stage for one runner class: ``runners/noise/<runner>.json``.

``harness compare --aa REV`` writes it (a revision against itself); later comparisons on that
runner class read it and widen each stage's margin to ``2 x noise``. The file is small JSON::

    {"schema_version": 1, "runner": "cpu", "rev": "<sha>", "created_at": "...",
     "cases": {"pipeline/t2va-int8[cpu]": {"DenoisingStage": {"noise": 0.021, "n": 7, ...}}}}
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.compare.latency import round_samples
from harness.compare.stats import calibrate_noise
from harness.errors import ReportFormatError
from harness.fsio import slug, write_json_atomic
from harness.model import Attempt, json_safe

NOISE_SCHEMA_VERSION = 1


def noise_path(noise_dir: Path, runner: str) -> Path:
    return noise_dir / f"{slug(runner)}.json"


def load_noise(path: Path) -> dict[str, dict[str, float]]:
    """case name -> stage -> noise; empty when the file does not exist."""
    if not path.is_file():
        return {}
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ReportFormatError(f"{path}: not valid JSON: {exc}") from exc
    if doc.get("schema_version") != NOISE_SCHEMA_VERSION:
        raise ReportFormatError(
            f"{path}: schema_version {doc.get('schema_version')!r} is not supported (expected "
            f"{NOISE_SCHEMA_VERSION}); recalibrate with `harness compare --aa REV`"
        )
    out: dict[str, dict[str, float]] = {}
    for case, stages in doc.get("cases", {}).items():
        out[case] = {
            stage: float(v["noise"])
            for stage, v in stages.items()
            if isinstance(v, Mapping) and isinstance(v.get("noise"), int | float)
        }
    return out


def calibrate(
    per_case: Mapping[str, tuple[Sequence[Attempt], Sequence[Attempt]]],
) -> dict[str, dict[str, dict[str, Any]]]:
    """case name -> stage -> ``{noise, ratio, ci_low, ci_high, n}`` from A/A attempts."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for case, (first, second) in per_case.items():
        a, b = round_samples(first), round_samples(second)
        stages = {}
        for stage, xs in a.items():
            ys = b.get(stage, [])
            if len(xs) < 2 or len(ys) < 2:
                continue
            cal = calibrate_noise(xs, ys)
            stages[stage] = {
                "noise": cal.noise,
                "ratio": cal.ratio,
                "ci_low": cal.ci_low,
                "ci_high": cal.ci_high,
                "n": min(cal.n_first, cal.n_second),
            }
        if stages:
            out[case] = stages
    return out


def store_noise(
    path: Path, runner: str, rev: str, cases: Mapping[str, Mapping[str, Mapping[str, Any]]]
) -> None:
    """Merge ``cases`` into the runner's noise file (other cases' figures are kept)."""
    doc: dict[str, Any] = {}
    if path.is_file():
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            doc = {}
    merged = dict(doc.get("cases", {})) if doc.get("schema_version") == NOISE_SCHEMA_VERSION else {}
    merged.update({k: dict(v) for k, v in cases.items()})
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(
        path,
        json_safe(
            {
                "schema_version": NOISE_SCHEMA_VERSION,
                "runner": runner,
                "rev": rev,
                "created_at": dt.datetime.now(dt.UTC).isoformat(),
                "cases": merged,
            }
        ),
    )
