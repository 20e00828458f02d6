"""What a comparison is asked to do (everything but the two revisions), and the latency rule's
settings it resolves with the runner's noise calibration."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from harness.compare.latency import LatencySettings
from harness.compare.noise import (
    DEFAULT_MAX_AGE_DAYS,
    NoiseFile,
    load_noise,
    noise_path,
    uncalibrated,
)
from harness.platforms.profile import Profile

Say = Callable[[str], None]


@dataclass(frozen=True)
class CompareRequest:
    """What to compare and how (everything but the two revisions)."""

    repo: Path = Path(".")
    case_paths: tuple[Path, ...] = ()
    keyword: str | None = None
    case_ids: tuple[str, ...] = ()  # only these cases (by id or display name)
    platforms: tuple[str, ...] = ()
    cases_from: str = "working"  # or "head": case files from head's checkout
    code_roots: tuple[str, ...] = ("targets/tinyav",)  # relative to each checkout
    out_root: Path = Path("reports")
    comparison_id: str | None = None
    profile: Profile = field(default_factory=Profile)
    references_root: Path | None = Path("references")
    latency: LatencySettings = field(default_factory=LatencySettings)
    quality_margins: Mapping[str, float] = field(default_factory=dict)
    budget_s: float | None = None
    noise_dir: Path | None = Path("runners/noise")
    noise_max_age_days: float = DEFAULT_MAX_AGE_DAYS  # older calibration is reported stale
    python: str | None = None
    # a coverage attempt per side of every case that is not no_change, for diff-aware triage
    coverage: bool = True
    warmup: int = 1  # at least this many warm-up runs per case and side
    # a fresh pair of workers per round (rounds exchangeable); False: one worker per side
    worker_per_round: bool = True
    # measured runs per case, side and round (the round's median is its sample); None: 3 with
    # a fresh pair per round (start-up amortised), 1 with reused workers
    runs_per_round: int | None = None
    argv: tuple[str, ...] = ()
    progress: Say | None = None


def runs_per_round(request: CompareRequest) -> int:
    """Measured runs per case, side and round: as asked, else 3 with a fresh pair of workers
    per round (a pair costs seconds to start, a run a fraction of one) and 1 with reused
    workers."""
    if request.runs_per_round is not None:
        return request.runs_per_round
    return 3 if request.worker_per_round else 1


def read_calibration(request: CompareRequest, noise_dir: Path | None) -> NoiseFile:
    """The runner's calibration from ``noise_dir`` (already resolved away from head's tree),
    or why there is none."""
    if noise_dir is None:
        return uncalibrated("no noise folder (--noise-dir)")
    return load_noise(
        noise_path(noise_dir, request.profile.name),
        runner=request.profile.name,
        max_age_days=request.noise_max_age_days,
    )


def latency_settings(request: CompareRequest, calibration: NoiseFile) -> LatencySettings:
    """The request's rule with the calibration's figures and its note."""
    return replace(request.latency, noise=calibration.figures, calibration_note=calibration.note)


__all__ = ["CompareRequest", "Say", "latency_settings", "read_calibration", "runs_per_round"]
