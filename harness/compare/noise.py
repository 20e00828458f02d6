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


def _by_round(attempts: Sequence[Attempt]) -> dict[int, dict[str, float]]:
    """round -> stage -> seconds of that round's final measured attempt, if it passed."""
    finals: dict[int, Attempt] = {}
    for a in attempts:
        if not a.warmup and a.status != "budget_declined":
            finals[a.round] = a
    out = {}
    for r, a in finals.items():
        if a.status == "passed":
            out[r] = {**{k: float(v) for k, v in a.stages.items() if v > 0}, "total": a.duration_s}
    return out


def calibrate(
    per_case: Mapping[str, tuple[Sequence[Attempt], Sequence[Attempt]]],
) -> dict[str, dict[str, dict[str, Any]]]:
    """case name -> stage -> ``{noise, ratio, ci_low, ci_high, n}`` from A/A attempts, the
    two runs of each round paired (rounds where either side failed are left out)."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for case, (first, second) in per_case.items():
        a, b = _by_round(first), _by_round(second)
        rounds = sorted(set(a) & set(b))
        stages = {}
        for stage in a[rounds[0]] if rounds else {}:
            pairs = [(a[r][stage], b[r][stage]) for r in rounds if stage in a[r] and stage in b[r]]
            if len(pairs) < 2 or min(min(p) for p in pairs) <= 0:
                continue
            cal = calibrate_noise([p[0] for p in pairs], [p[1] for p in pairs])
            stages[stage] = {
                "noise": cal.noise,
                "ratio": cal.ratio,
                "ci_low": cal.ci_low,
                "ci_high": cal.ci_high,
                "n": cal.rounds,
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
