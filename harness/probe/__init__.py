"""What a target calls to tell the harness what happened inside an attempt.

Import-light on purpose: importing this module imports nothing beyond the standard library
(and :mod:`harness.fsio`, which is standard library only), so instrumented production code pays
nothing for it; numpy, PyAV and safetensors are imported only when a call needs them, and torch
never (a tensor passed in means the target has imported it already). Outside an attempt every
function is a cheap no-op (``seed()`` and ``platform()`` return ``None``).

Example, inside a target::

    from harness import probe

    def t2v(steps: int = 4) -> None:
        with probe.stage("DenoisingStage"):
            latents = denoise(noise(probe.seed() or 0), steps)
        probe.fingerprint("latents", latents)
        probe.output("video", decode(latents), kind="video", fps=8)
        probe.note("dispatch.int8_mm", "dequant_matmul")
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.probe.content import (
    Held,
    content_hash,
    describe,
    hash_input,
    hold,
)
from harness.probe.outputs import OutputFile, record_output
from harness.probe.perflog import RequestScope, perf_folder
from harness.probe.samples import layer_sample
from harness.probe.stages import StageBook, StageDevice, StageTimer

__all__ = [
    "active",
    "content_hash",
    "describe",
    "fingerprint",
    "hash_input",
    "note",
    "output",
    "output_file",
    "platform",
    "platform_info",
    "record_input",
    "request",
    "seed",
    "stage",
]


@dataclass
class _Recorder:
    """Everything one attempt records; owned by the worker, filled by the probe calls."""

    seed: int | None
    platform: str | None
    output_dir: Path | None
    # The attempt's platform, for synchronize / device events / peak memory (None: wall time).
    device: StageDevice | None = None
    book: StageBook = field(default_factory=StageBook)
    # Name -> what was recorded, in call order; a small tensor or array is a Held copy until
    # the attempt ends (or until read): read through ``fingerprints`` and ``inputs``.
    recorded_fingerprints: dict[str, Any] = field(default_factory=dict)
    recorded_inputs: dict[str, Any] = field(default_factory=dict)
    # Fingerprint name -> its layer sample (harness.probe.samples): taken at the call for a
    # tensor too large to hold, from the held copy when the attempt ends for the others.
    layer_samples: dict[str, Any] = field(default_factory=dict)
    outputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    notes: dict[str, Any] = field(default_factory=dict)
    # Output arrays kept in memory so checks in the same worker need not re-read the files.
    output_arrays: dict[str, Any] = field(default_factory=dict)
    # The platform identity the attempt runs as (harness.platforms.Identity JSON).
    info: Mapping[str, Any] | None = None
    made_output_dir: bool = False
    # Stages still open when the attempt ended, innermost last (filled by ``_end``): the
    # worker makes such an attempt an error; they have no time.
    unclosed: tuple[str, ...] = ()
    # False for a server request (``request``): its perf line has no outputs, and decoding an
    # MP4 to count its NaNs cost more than all its stages' bookkeeping together.
    record_outputs: bool = True

    def settle(self) -> None:
        """Describe the held fingerprints and hash the held inputs (the attempt has ended)."""
        if self.record_outputs:
            for name, value in list(self.recorded_fingerprints.items()):
                if isinstance(value, Held):
                    self.layer_samples[name] = _sample(value.copy)
        _settled(self.recorded_fingerprints, Held.describe)
        _settled(self.recorded_inputs, Held.content_hash)

    @property
    def fingerprints(self) -> dict[str, dict[str, Any]]:
        """Fingerprint name -> description, in call order; held copies described first."""
        return _settled(self.recorded_fingerprints, Held.describe)

    @property
    def layers(self) -> dict[str, Any]:
        """Fingerprint name -> layer sample (float32 numpy), in call order; fingerprints of
        what is not a real-valued tensor or array have none."""
        self.settle()
        samples = self.layer_samples
        return {n: samples[n] for n in self.recorded_fingerprints if samples.get(n) is not None}

    @property
    def inputs(self) -> dict[str, str]:
        """Input name -> content hash, in call order; held copies hashed first."""
        return _settled(self.recorded_inputs, Held.content_hash)

    def __post_init__(self) -> None:
        self.book.device = self.device

    @property
    def stages(self) -> dict[str, float]:
        """Stage name -> synchronized wall seconds, in the order the stages started."""
        return self.book.stages

    @property
    def stage_device(self) -> dict[str, float]:
        """Stage name -> device seconds (device events); empty where the platform has none."""
        return self.book.device_s

    @property
    def stage_memory(self) -> dict[str, int]:
        """Stage name -> peak allocated device bytes; empty without a device counter."""
        return self.book.memory

    @property
    def stage_cpu(self) -> dict[str, float]:
        """Stage name -> CPU seconds of the whole process while the stage was open."""
        return self.book.cpu_s

    @property
    def stage_wait(self) -> dict[str, float]:
        """Stage name -> run-queue delay in seconds while the stage was open (Linux; empty
        elsewhere): time the process's threads were runnable but not running."""
        return self.book.wait_s


def _settled(recorded: dict[str, Any], finish: Callable[[Held], Any]) -> dict[str, Any]:
    """A copy of ``recorded`` with every :class:`~harness.probe.content.Held` value finished,
    and stored back so it is finished once. A copy: a thread that probes after the attempt
    ended (an isolation failure of its case) never changes what was read."""
    out = {}
    for name, value in list(recorded.items()):
        if isinstance(value, Held):
            value = recorded[name] = finish(value)
        out[name] = value
    return out


def _sample(x: Any) -> Any:
    """:func:`~harness.probe.samples.layer_sample`, or None where it cannot take one (a
    tensor kind it does not know): a layered reference then compares that layer by hash."""
    try:
        return layer_sample(x)
    except Exception:
        return None


_current: _Recorder | None = None


def _begin(
    seed: int | None,
    platform: str | None,
    output_dir: Path | None,
    *,
    device: StageDevice | None = None,
    info: Mapping[str, Any] | None = None,
) -> _Recorder:
    """Start recording an attempt (called by the worker only). ``device`` is the attempt's
    platform object (``harness.platforms.get(name)``), through which stages synchronize, read
    device events and peak memory; None times stages by wall clock alone. ``info`` is the
    identity the attempt runs as (``probe.platform_info()``)."""
    global _current
    _current = _Recorder(
        seed=seed, platform=platform, output_dir=output_dir, device=device, info=info
    )
    return _current


def _end() -> _Recorder | None:
    """Stop recording and hand back what was recorded (called by the worker only)."""
    global _current
    rec, _current = _current, None
    if rec is not None:
        rec.unclosed = tuple(rec.book.close())
        rec.settle()
    return rec


def _absorb(
    stages: Mapping[str, float],
    stage_cpu: Mapping[str, float],
    fingerprints: Mapping[str, Mapping[str, Any]],
    prefix: str = "",
) -> None:
    """Add stages and fingerprints recorded elsewhere (a server's perf log) to the attempt
    (called by the worker only): a stage already there accumulates, as one entered twice
    does; fingerprints are described already and keep their order, under ``prefix``."""
    rec = _current
    if rec is None:
        return
    for name, seconds in stages.items():
        rec.book.stages[name] = rec.book.stages.get(name, 0.0) + float(seconds)
    for name, seconds in stage_cpu.items():
        rec.book.cpu_s[name] = rec.book.cpu_s.get(name, 0.0) + float(seconds)
    for name, desc in fingerprints.items():
        rec.recorded_fingerprints[f"{prefix}{name}"] = dict(desc)


def request(request_id: str, *, rank: int | None = None) -> AbstractContextManager[None]:
    """Record one server request and append it to the per-request perf log.

    When ``HARNESS_PERF_LOG`` names a folder, the stages, fingerprints, inputs and notes that
    the block records (the ordinary probe calls; ``output`` records nothing) go to a fresh
    recorder, written when the
    block ends as one JSON line to ``<folder>/perf-rank<R>-<pid>.jsonl``
    (:mod:`harness.probe.perflog` gives the line's schema); ``rank`` defaults to ``RANK``.
    Otherwise it is a ``nullcontext`` and costs nothing. A server wraps each request in it on
    every rank; the recorder is the process's, so a process records one request at a time::

        with probe.request(body.request_id):
            pipeline(body)
    """
    folder = perf_folder()
    if folder is None:
        return contextlib.nullcontext()
    # The file that serves the request (the caller's): which checkout the server's code came
    # from, for code provenance in a comparison.
    caller = sys._getframe(1).f_code.co_filename
    return RequestScope(
        folder, str(request_id), rank, _request_recorder, _swap, code_file=os.path.abspath(caller)
    )


def _request_recorder() -> _Recorder:
    return _Recorder(seed=None, platform=None, output_dir=None, record_outputs=False)


def _swap(rec: _Recorder | None) -> _Recorder | None:
    """Make ``rec`` the current recorder; returns the one it replaced."""
    global _current
    previous, _current = _current, rec
    return previous


def active() -> bool:
    """True inside an attempt run by the harness."""
    return _current is not None


def seed() -> int | None:
    """The attempt's seed (Python's ``random``, numpy and torch are already seeded with it)."""
    return _current.seed if _current is not None else None


def platform() -> str | None:
    """The platform the attempt runs on (``cpu``, ``cuda``, ``hip``, ...), or None outside one."""
    return _current.platform if _current is not None else None


def platform_info() -> Mapping[str, Any] | None:
    """The platform identity the attempt runs as, or None outside one (or when the harness
    knows only the platform's name).

    Keys: ``platform``, ``arch`` (``gfx942``, ``sm_90``...), ``fp8`` (``e4m3fn``,
    ``e4m3fnuz`` or None), ``capabilities`` (``int8_mm``, ``fused_kernels``, ``fp8``...),
    ``simulated`` (True when the attempt runs on the CPU presenting that platform) and
    ``reason``. A target decides its kernel paths from it, so a simulated platform exercises
    that platform's decisions; what then really executes is a separate fact.

    >>> info = platform_info() or {}                          # doctest: +SKIP
    >>> "int8_mm" in info.get("capabilities", ())             # doctest: +SKIP
    """
    if _current is None or _current.info is None:
        return None
    return dict(_current.info)


def note(name: str, value: Any) -> None:
    """Record a small JSON value, such as which dispatch path ran; checks can assert on it."""
    if _current is None:
        return
    if not isinstance(value, str | int | float | bool) and value is not None:
        value = str(value)
    _current.notes[name] = value


def stage(name: str) -> AbstractContextManager[None]:
    """Time a named stage; stages keep their order, and one entered twice accumulates.

    Through the attempt's platform, when its device is initialized: synchronized before and
    after (a device fault surfacing at that synchronize is raised here, into the attempt),
    device time from device events where the platform has them (``stage_device`` of the
    attempt record), and the peak allocated device memory while it was open
    (``stage_memory``). Torch is never imported here: an uninitialized device, or the CPU,
    leaves a plain wall-clock span.
    """
    if _current is None:
        return contextlib.nullcontext()
    return StageTimer(_current.book, name)


def fingerprint(name: str, tensor_or_array: Any) -> None:
    """Record a fingerprint of an intermediate tensor; order of calls is kept.

    A tensor or array of up to 1 MiB is copied here and described when the target returns,
    outside its timing (``content.hold``); the fingerprint is of what it held at this call.
    """
    if _current is None:
        return
    held = hold(tensor_or_array)
    _current.recorded_fingerprints[name] = describe(tensor_or_array) if held is None else held
    if held is None and _current.record_outputs:
        # Too large to hold: the layer sample is taken now (a few hundred values), as the
        # description was; a held copy is sampled when the attempt ends.
        _current.layer_samples[name] = _sample(tensor_or_array)
    else:
        _current.layer_samples.pop(name, None)


def record_input(name: str, data_or_path: Any) -> None:
    """Record the hash of an input's decoded content (a media path is decoded first).

    ``data_or_path`` is an array or tensor, bytes, a ``Path`` (or a ``str`` naming an existing
    file), or any other ``str``, which is hashed as text (a prompt, say).
    """
    if _current is None:
        return
    held = hold(data_or_path)  # a small tensor or array: hashed when the target returns
    _current.recorded_inputs[name] = hash_input(data_or_path) if held is None else held


def output(
    name: str, array_or_path: Any, *, encoded_from: str | Sequence[str] = (), **meta: Any
) -> None:
    """Record an output: an array (saved as safetensors) or a file (copied into the run).

    Either way its content is decoded and counted for NaN/Inf, which the always-on
    ``finite(name)`` check turns into a verdict; a file the harness cannot decode records
    ``nonfinite: None`` and why, and that check reports *not run*. Each name may be used once
    per attempt. ``meta`` describes the output for the checks: ``kind`` (``video``,
    ``audio``, ``image``, ``tensor``, ``file``), ``fps``, ``sample_rate``.

    ``encoded_from`` names the outputs (recorded earlier in this attempt from arrays) a media
    file was encoded from, e.g. ``probe.output("mp4", path, encoded_from=("video", "audio"))``:
    the file's NaN/Inf count is then theirs (``nonfinite_from`` says so) and the file is only
    demuxed, not decoded, which for an MP4 saved most of the probe's time. A file that
    ``harness.media.write_mp4`` wrote in this process, unchanged since, is not even demuxed:
    the packets its muxer counted per stream stand for the demux's. A name that is not such an
    output makes the probe decode the file as usual.
    """
    rec = _current
    if rec is None or not rec.record_outputs:
        return
    record_output(rec, name, array_or_path, encoded_from, meta)


def output_file(
    name: str, suffix: str, *, encoded_from: str | Sequence[str] = (), **meta: Any
) -> AbstractContextManager[Path]:
    """Where to write output ``name``, a file with ``suffix``; recorded as
    ``output(name, path, encoded_from=..., **meta)`` when the block ends without an error.

    Inside an attempt the path is the output's own file in the run's output folder, so the
    probe hashes the file where it lies instead of copying it in: a target that would write to
    a temporary folder and hand the probe that file saves the folder, the copy and the removal
    (about 0.5 ms per attempt on ext4, a tenth of what the harness adds to a tiny pipeline).
    Outside an attempt, or in one without an output folder, the path is in a temporary folder
    that is removed after the block (without an output folder the record then keeps no
    ``path``). A block that raises records nothing and removes what it wrote::

        with probe.output_file("mp4", ".mp4", encoded_from=("video",)) as path:
            write_mp4(path, frames, fps=16)
    """
    if not (suffix.startswith(".") and suffix.count(".") == 1 and Path(f"x{suffix}").suffix):
        raise ValueError(
            f"probe.output_file('{name}', {suffix!r}): the suffix must be one file suffix "
            "with its dot, such as '.mp4'"
        )
    return OutputFile(name, suffix, encoded_from, meta, lambda: _current)


def snapshot(rec: _Recorder) -> Mapping[str, Any]:
    """The JSON-ready part of a recorder (arrays left out)."""
    return {
        "stages": dict(rec.stages),
        "stage_device": dict(rec.stage_device),
        "stage_memory": dict(rec.stage_memory),
        "stage_cpu": dict(rec.stage_cpu),
        "stage_wait": dict(rec.stage_wait),
        "fingerprints": dict(rec.fingerprints),
        "inputs": dict(rec.inputs),
        "outputs": dict(rec.outputs),
        "notes": dict(rec.notes),
    }
