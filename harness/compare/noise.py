"""Base-vs-base noise per case and stage for one runner class: ``runners/noise/<runner>.json``.

``harness compare --aa REV`` writes it (a revision against itself); later comparisons on that
runner class read it and widen each stage's margin to ``2 x noise`` (capped). The file is
small JSON, stamped with what it is valid for::

    {"schema_version": 2, "runner": "cpu", "env_digest": "1f0c...", "rev": "<sha>",
     "created_at": "2026-12-01T22:00:00+00:00",
     "cases": {"pipeline/t2va-int8[cpu]": {"DenoisingStage": {"noise": 0.021, "n": 7, ...}}}}

Where a comparison reads it matters: a head that ships its own noise file must not choose its
own margins. :func:`noise_dir_for` therefore reads a folder inside the repository from base's
checkout and refuses one inside head's; a folder outside both is read as given. A file older
than the allowed age is used but reported stale; a missing file, an unstamped one or one from
another runner class leaves the runner uncalibrated, and every latency verdict says so.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from harness.compare.latency import round_samples
from harness.compare.stats import MAX_MARGIN, calibrate_noise
from harness.errors import ReportFormatError, UsageError
from harness.fsio import slug, write_json_atomic
from harness.model import Attempt, json_safe

NOISE_SCHEMA_VERSION = 2

# The largest noise figure kept: twice it is the widest margin calibration can make.
NOISE_CAP = MAX_MARGIN / 2

# Calibration older than this many days is reported stale (``--noise-max-age``).
DEFAULT_MAX_AGE_DAYS = 30.0

CalibrationStatus = Literal["calibrated", "stale", "uncalibrated"]


def noise_path(noise_dir: Path, runner: str) -> Path:
    return noise_dir / f"{slug(runner)}.json"


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def noise_dir_for(noise_dir: Path, *, repo: Path, base: Path, head: Path) -> Path:
    """Where a comparison of ``base`` and ``head`` (checkouts of ``repo``) reads its noise.

    A folder inside the repository's working tree (``runners/noise`` from its root, say) is
    read at the same place in base's checkout: the working tree may hold head's files, and
    head must not pick its own margins. A folder inside head's checkout is refused; any other
    folder is read as given.
    """
    where = noise_dir.expanduser()
    where = (where if where.is_absolute() else Path.cwd() / where).resolve()
    if _inside(where, head.resolve()) and head.resolve() != base.resolve():
        raise UsageError(
            f"--noise-dir {noise_dir}: lies in head's checkout; head could ship its own noise "
            "figures (use a folder outside it, or one in the repository, read from base)"
        )
    root = repo.resolve()
    if _inside(where, root):
        return base / where.relative_to(root)
    return where


@dataclass(frozen=True)
class NoiseFile:
    """A runner's calibration as a comparison found it: the figures it may use and its state.

    ``note`` is what every latency verdict's reason adds (None when calibrated and fresh).
    """

    status: CalibrationStatus
    source: str | None
    figures: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    note: str | None = None
    runner: str | None = None
    env_digest: str | None = None
    created_at: str | None = None
    age_days: float | None = None

    def to_json(self) -> dict[str, Any]:
        """comparison.json's ``calibration``."""
        return json_safe(
            {
                "status": self.status,
                "source": self.source,
                "note": self.note,
                "runner": self.runner,
                "env_digest": self.env_digest,
                "created_at": self.created_at,
                "age_days": None if self.age_days is None else round(self.age_days, 2),
            }
        )

    def against(self, env_digest: str) -> NoiseFile:
        """This calibration, noting when it was measured in another environment than
        ``env_digest`` (base's, known once the rounds ran)."""
        if self.status == "uncalibrated" or not self.env_digest or self.env_digest == env_digest:
            return self
        extra = f"calibrated in another environment (digest {self.env_digest}, now {env_digest})"
        return NoiseFile(
            self.status,
            self.source,
            self.figures,
            f"{self.note}; {extra}" if self.note else extra,
            self.runner,
            self.env_digest,
            self.created_at,
            self.age_days,
        )


def uncalibrated(why: str, source: Path | None = None) -> NoiseFile:
    return NoiseFile("uncalibrated", str(source) if source else None, {}, why)


def load_noise(
    path: Path,
    *,
    runner: str,
    max_age_days: float = DEFAULT_MAX_AGE_DAYS,
    now: dt.datetime | None = None,
) -> NoiseFile:
    """The calibration of runner class ``runner`` in ``path``, or why there is none usable."""
    if not path.is_file():
        return uncalibrated(f"no calibration at {path} (`harness compare --aa REV` writes one)")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ReportFormatError(f"{path}: not valid JSON: {exc}") from exc
    if not isinstance(doc, Mapping) or doc.get("schema_version") != NOISE_SCHEMA_VERSION:
        got = doc.get("schema_version") if isinstance(doc, Mapping) else None
        return uncalibrated(
            f"{path}: schema_version {got!r} is not {NOISE_SCHEMA_VERSION} (no runner, "
            "environment and date stamp); recalibrate with `harness compare --aa REV`",
            path,
        )
    if doc.get("runner") != runner:
        return uncalibrated(
            f"{path} was calibrated on runner class {doc.get('runner')!r}, not {runner!r}", path
        )
    try:
        created = dt.datetime.fromisoformat(str(doc.get("created_at")))
    except ValueError:
        return uncalibrated(f"{path}: created_at {doc.get('created_at')!r} is not a date", path)
    if created.tzinfo is None:
        created = created.replace(tzinfo=dt.UTC)
    age = ((now or dt.datetime.now(dt.UTC)) - created).total_seconds() / 86400.0
    figures: dict[str, dict[str, float]] = {}
    for case, stages in (doc.get("cases") or {}).items():
        if isinstance(stages, Mapping):
            figures[case] = {
                stage: min(float(v["noise"]), NOISE_CAP)
                for stage, v in stages.items()
                if isinstance(v, Mapping) and isinstance(v.get("noise"), int | float)
            }
    stale = age > max_age_days
    return NoiseFile(
        "stale" if stale else "calibrated",
        str(path),
        figures,
        f"calibration stale: {path} is {age:.0f} days old (limit {max_age_days:g} days, "
        "--noise-max-age); recalibrate with `harness compare --aa REV`"
        if stale
        else None,
        runner,
        doc.get("env_digest"),
        created.isoformat(),
        age,
    )


def calibrate(
    per_case: Mapping[str, tuple[Sequence[Attempt], Sequence[Attempt]]],
    *,
    contention_free: Collection[str] = (),
) -> dict[str, dict[str, dict[str, Any]]]:
    """case name -> stage -> ``{noise, measured, capped, ratio, ci_low, ci_high, n}`` from A/A
    attempts, the two sides of each round paired (each side's sample being the median of its
    runs in the round, :func:`~harness.compare.latency.round_samples`; rounds where either
    side failed are left out). Cases named in ``contention_free`` are measured as they will be
    judged: wall time less run-queue delay. ``noise`` is capped at :data:`NOISE_CAP`;
    ``measured`` keeps the figure as measured."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for case, (first, second) in per_case.items():
        cf = case in contention_free
        # one sample per round and side, as comparisons judge them (the round's median)
        a, b = (round_samples(s, None, contention_free=cf) for s in (first, second))
        rounds = sorted(set(a) & set(b))
        stages = {}
        for stage in a[rounds[0]] if rounds else {}:
            pairs = [(a[r][stage], b[r][stage]) for r in rounds if stage in a[r] and stage in b[r]]
            if len(pairs) < 2 or min(min(p) for p in pairs) <= 0:
                continue
            cal = calibrate_noise([p[0] for p in pairs], [p[1] for p in pairs])
            stages[stage] = {
                "noise": min(cal.noise, NOISE_CAP),
                "measured": cal.noise,
                "capped": cal.noise > NOISE_CAP,
                "ratio": cal.ratio,
                "ci_low": cal.ci_low,
                "ci_high": cal.ci_high,
                "n": cal.rounds,
            }
        if stages:
            out[case] = stages
    return out


def store_noise(
    path: Path,
    runner: str,
    rev: str,
    cases: Mapping[str, Mapping[str, Mapping[str, Any]]],
    *,
    env_digest: str,
) -> None:
    """Write ``cases`` to the runner's noise file, stamped with the runner class, the
    environment digest and the date. Other cases' figures are kept when the file was
    calibrated for the same runner class and environment, dropped otherwise; while any are
    kept the file keeps its older date, so staleness is judged by the oldest figure."""
    doc: dict[str, Any] = {}
    if path.is_file():
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            doc = {}
    same = (
        isinstance(doc, Mapping)
        and doc.get("schema_version") == NOISE_SCHEMA_VERSION
        and doc.get("runner") == runner
        and doc.get("env_digest") == env_digest
    )
    merged = dict(doc.get("cases", {})) if same else {}
    kept_old = bool(set(merged) - set(cases))
    merged.update({k: dict(v) for k, v in cases.items()})
    now = dt.datetime.now(dt.UTC).isoformat()
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(
        path,
        json_safe(
            {
                "schema_version": NOISE_SCHEMA_VERSION,
                "runner": runner,
                "env_digest": env_digest,
                "rev": rev,
                "created_at": doc.get("created_at", now) if kept_old else now,
                "noise_cap": NOISE_CAP,
                "cases": merged,
            }
        ),
    )
