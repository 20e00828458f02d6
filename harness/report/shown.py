"""Which attempt of a case the report shows, and which of its outputs are media to draw.

Kept apart from :mod:`harness.report.gallery` (numpy, PyAV, the reference store): a report with
no media output never imports them (~0.45 s of CPU per `harness` process).
"""

from __future__ import annotations

from harness.model import Attempt, CaseResult

#: Files PyAV decodes into frames, by suffix.
VIDEO_SUFFIXES = (".mp4", ".mkv", ".webm", ".mov", ".avi")


def _measured(case: CaseResult) -> list[Attempt]:
    return [a for a in case.attempts if not a.warmup and a.status != "budget_declined"]


def judged_attempt(case: CaseResult) -> Attempt | None:
    """The attempt whose checks are the case's: its last measured one."""
    measured = _measured(case)
    return measured[-1] if measured else None


def first_measured(case: CaseResult) -> Attempt | None:
    """The first measured attempt (a comparison's side shows it)."""
    measured = _measured(case)
    return measured[0] if measured else None


def video_outputs(a: Attempt) -> list[str]:
    kinds = {n: str(o.get("kind")) for n, o in a.outputs.items()}
    named = [n for n, k in kinds.items() if k in ("video", "image")]
    if named:
        return named
    # no video output: show an exported file PyAV decodes (an MP4 of the frames)
    return [
        n for n, o in a.outputs.items() if str(o.get("path", "")).lower().endswith(VIDEO_SUFFIXES)
    ]


def audio_outputs(a: Attempt) -> list[str]:
    return [n for n, o in a.outputs.items() if o.get("kind") == "audio"]


def has_media(case: CaseResult) -> bool:
    """Whether the report draws anything of ``case``'s judged attempt (frames or a waveform)."""
    a = judged_attempt(case)
    return a is not None and bool(video_outputs(a) or audio_outputs(a))
