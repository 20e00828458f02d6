"""What the HTML report shows of a case's media: for each video output its frames side by side
(reference, output; in a comparison reference, base, head) with a heat map of the difference
and the per-frame metric values, and for each audio output a waveform pair.

Frames shown are the first, middle and last of the frames the checks compared. The attempt
shown is the one the case's checks judged (its last measured attempt); in a comparison, each
side's first measured attempt (the one the first-divergence finding walks).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from markupsafe import Markup

from harness.media import select_frames
from harness.model import CaseResult, CheckResult, fmt_number
from harness.references.store import ReferenceStore
from harness.report import images, plots
from harness.report.images import ImageError, ImageFolder, Picture
from harness.report.shown import audio_outputs as _audio_outputs
from harness.report.shown import first_measured, judged_attempt
from harness.report.shown import video_outputs as _video_outputs

Loader = Callable[[Sequence[int]], np.ndarray]  # frame indices -> uint8 [len, H, W, 3]


@dataclass(frozen=True)
class Cell:
    """One picture of a frame column (or why there is none)."""

    label: str
    picture: Picture | None = None
    note: str = ""
    scale: tuple[str, str] | None = None  # a heat map's colour bar ends: "0", "0.0039 (1/255)"
    identical: bool = False  # a difference that is zero everywhere: no picture


@dataclass(frozen=True)
class Column:
    frame: int
    cells: tuple[Cell, ...]
    values: tuple[str, ...]  # "ssim 0.998", one per metric


@dataclass(frozen=True)
class VideoBlock:
    output: str
    columns: tuple[Column, ...] = ()
    lines: tuple[Markup, ...] = ()
    problems: tuple[str, ...] = ()


@dataclass(frozen=True)
class AudioBlock:
    output: str
    waves: tuple[Markup, ...] = ()
    problems: tuple[str, ...] = ()


@dataclass(frozen=True)
class Gallery:
    caption: str
    videos: tuple[VideoBlock, ...] = ()
    audios: tuple[AudioBlock, ...] = field(default_factory=tuple)


def _quality(checks: Sequence[CheckResult], output: str) -> list[CheckResult]:
    return [c for c in checks if c.output == output and "reference" in c.settings]


def _per_frame(check: CheckResult) -> dict[int, Any]:
    return {
        int(row["frame"]): row.get("obtained")
        for row in check.details
        if isinstance(row.get("frame"), int)
    }


def _output_loader(base: Path, info: Mapping[str, Any]) -> Loader:
    cache: list[np.ndarray] = []

    def load(frames: Sequence[int]) -> np.ndarray:
        if not cache:
            cache.append(images.load_frames(base, info))
        video = cache[0]
        bad = [f for f in frames if not 0 <= f < len(video)]
        if bad:
            raise ImageError(f"output has {len(video)} frames, no frame {bad[0]}")
        return video[list(frames)]

    return load


def _reference_loader(store: ReferenceStore | None, key: str | None) -> Loader | None:
    if key is None:
        return None

    def load(frames: Sequence[int]) -> np.ndarray:
        if store is None:
            raise ImageError(f"reference {key}: no reference store given to the report")
        return images.reference_frames(store, key, frames)

    return load


def _compared(checks: Sequence[CheckResult], n_frames: int | None) -> list[int]:
    for c in checks:
        frames = c.settings.get("frames")
        if isinstance(frames, list) and frames and all(isinstance(f, int) for f in frames):
            return sorted(frames)
    return list(range(n_frames)) if n_frames else [0]


def _video_block(
    output: str,
    sources: Sequence[tuple[str, Loader | None]],
    diff: tuple[int, int] | None,
    compared: Sequence[int],
    values: Callable[[int], tuple[str, ...]],
    lines: Sequence[Markup],
    folder: ImageFolder,
    key: str,
) -> VideoBlock:
    shown = [compared[i] for i in select_frames(len(compared), "first-mid-last")]
    problems: list[str] = []
    loaded: list[np.ndarray | None] = []
    for label, load in sources:
        if load is None:
            loaded.append(None)
            continue
        try:
            loaded.append(load(shown))
        except ImageError as exc:
            problems.append(f"{label}: {exc}")
            loaded.append(None)
    columns = []
    for j, f in enumerate(shown):
        cells = []
        for (label, _load), arr in zip(sources, loaded, strict=True):
            if arr is not None:
                cells.append(Cell(label, folder.write(f"{key}/{label}/{f}", arr[j])))
            else:
                cells.append(Cell(label, note="not available"))
        if diff is None:
            columns.append(Column(f, tuple(cells), values(f)))
            continue
        a, b = loaded[diff[0]], loaded[diff[1]]
        label = f"|{sources[diff[0]][0]} - {sources[diff[1]][0]}|"
        if a is not None and b is not None:
            try:
                h = images.heat(a[j], b[j])
                if h.rgb is None:
                    cells.append(Cell(label, note="identical", identical=True))
                else:
                    note = f"max {fmt_number(h.max)}/255, mean {fmt_number(round(h.mean, 4))}/255"
                    top = h.scale.removeprefix("0 .. ")
                    pic = folder.write(f"{key}/diff/{f}", h.rgb)
                    cells.append(Cell(label, pic, note, scale=("0", top)))
            except ImageError as exc:
                cells.append(Cell(label, note=str(exc)))
        columns.append(Column(f, tuple(cells), values(f)))
    return VideoBlock(output, tuple(columns), tuple(lines), tuple(problems))


def _lines(checks: Sequence[CheckResult], prefix: str = "") -> list[Markup]:
    out = []
    for c in checks:
        per = _per_frame(c)
        if len(per) > 1:
            frames = sorted(per)
            t = c.threshold if isinstance(c.threshold, int | float) else None
            vals = [per[f] for f in frames]
            out.append(plots.frame_line(prefix + c.metric, frames, vals, t, c.op))
    return [m for m in out if m]


def run_gallery(
    case: CaseResult, base: Path, store: ReferenceStore | None, folder: ImageFolder, key: str
) -> Gallery | None:
    """Frames and audio of a run's case, against its reference."""
    a = judged_attempt(case)
    if a is None or not (_video_outputs(a) or _audio_outputs(a)):
        return None
    videos = []
    for name in _video_outputs(a):
        checks = _quality(case.checks, name)
        ref_key = next((str(c.settings["reference"]) for c in checks), None)
        n = (a.outputs[name].get("shape") or [None])[0]
        compared = _compared(checks, n if isinstance(n, int) else None)

        def values(f: int, checks: list[CheckResult] = checks) -> tuple[str, ...]:
            return tuple(
                f"{c.metric} {fmt_number(_per_frame(c)[f])}" for c in checks if f in _per_frame(c)
            )

        sources: list[tuple[str, Loader | None]] = (
            [("reference", _reference_loader(store, ref_key))] if ref_key else []
        )
        sources.append(("output", _output_loader(base, a.outputs[name])))
        diff = (1, 0) if ref_key else None
        block = _video_block(
            name, sources, diff, compared, values, _lines(checks), folder, f"{key}/{name}"
        )
        if not ref_key:
            note = "no quality check against a reference on this output: no difference shown"
            block = VideoBlock(name, block.columns, block.lines, (*block.problems, note))
        videos.append(block)
    audios = []
    for name in _audio_outputs(a):
        checks = _quality(case.checks, name)
        ref_key = next((str(c.settings["reference"]) for c in checks), None)
        audios.append(
            _audio_block(
                name,
                [
                    *([("reference", _ref_audio(store, ref_key))] if ref_key else []),
                    ("output", _out_audio(base, a.outputs[name])),
                ],
            )
        )
    caption = f"attempt {a.index} (the one the checks judged)"
    return Gallery(caption, tuple(videos), tuple(audios))


def comparison_gallery(
    base_case: CaseResult | None,
    head_case: CaseResult | None,
    dirs: tuple[Path, Path],
    store: ReferenceStore | None,
    folder: ImageFolder,
    key: str,
) -> Gallery | None:
    """Reference, base and head frames with |head - base|, and the three waveforms."""
    b = first_measured(base_case) if base_case else None
    h = first_measured(head_case) if head_case else None
    if b is None or h is None:
        return None
    names = [n for n in _video_outputs(h) if n in b.outputs]
    if not names and not _audio_outputs(h):
        return None
    assert base_case is not None and head_case is not None
    videos = []
    for name in names:
        bc, hc = _quality(base_case.checks, name), _quality(head_case.checks, name)
        ref_key = next((str(c.settings["reference"]) for c in [*hc, *bc]), None)
        n = (h.outputs[name].get("shape") or [None])[0]
        compared = _compared(hc or bc, n if isinstance(n, int) else None)

        def values(
            f: int, bc: list[CheckResult] = bc, hc: list[CheckResult] = hc
        ) -> tuple[str, ...]:
            out = []
            for c in hc:
                bv = next((_per_frame(x).get(f) for x in bc if x.metric == c.metric), None)
                hv = _per_frame(c).get(f)
                if hv is not None or bv is not None:
                    out.append(f"{c.metric} base {fmt_number(bv)} / head {fmt_number(hv)}")
            return tuple(out)

        sources: list[tuple[str, Loader | None]] = [
            ("reference", _reference_loader(store, ref_key)),
            ("base", _output_loader(dirs[0], b.outputs[name])),
            ("head", _output_loader(dirs[1], h.outputs[name])),
        ]
        lines = [*_lines(bc, "base "), *_lines(hc, "head ")]
        videos.append(
            _video_block(name, sources, (2, 1), compared, values, lines, folder, f"{key}/{name}")
        )
    audios = []
    for name in _audio_outputs(h):
        if name not in b.outputs:
            continue
        hc = _quality(head_case.checks, name)
        ref_key = next((str(c.settings["reference"]) for c in hc), None)
        audios.append(
            _audio_block(
                name,
                [
                    *([("reference", _ref_audio(store, ref_key))] if ref_key else []),
                    ("base", _out_audio(dirs[0], b.outputs[name])),
                    ("head", _out_audio(dirs[1], h.outputs[name])),
                ],
            )
        )
    caption = f"first measured attempt of each side (base #{b.index}, head #{h.index})"
    return Gallery(caption, tuple(videos), tuple(audios))


AudioLoader = Callable[[], tuple[np.ndarray, int]]


def _ref_audio(store: ReferenceStore | None, key: str | None) -> AudioLoader:
    def load() -> tuple[np.ndarray, int]:
        if store is None or key is None:
            raise ImageError(f"reference {key}: no reference store given to the report")
        return images.reference_audio(store, key)

    return load


def _out_audio(base: Path, info: Mapping[str, Any]) -> AudioLoader:
    return lambda: images.load_audio(base, info)


def _audio_block(output: str, sources: Sequence[tuple[str, AudioLoader]]) -> AudioBlock:
    waves, problems = [], []
    for label, load in sources:
        try:
            pcm, rate = load()
        except ImageError as exc:
            problems.append(f"{label}: {exc}")
            continue
        colour = plots.COLOURS.get(label, "#000")
        waves.append(plots.waveform(pcm, rate, label=label, colour=colour))
    return AudioBlock(output, tuple(waves), tuple(problems))
