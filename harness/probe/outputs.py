"""Outputs of an attempt: a file copied (or hashed where it lies) into the run's output
folder, or an array saved as safetensors, each with its NaN/Inf count and its description
(:func:`harness.probe.output` and :func:`harness.probe.output_file` are the API)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.fsio import slug, write_array
from harness.probe.content import (
    _DECODABLE,
    _describe,
    _file_nonfinite,
    _is_pathlike,
    copy_hashed,
    muxed_by_harness,
    sources_nonfinite,
)

if TYPE_CHECKING:
    from harness.probe import _Recorder as Recorder


def claim(rec: Recorder, name: str, suffix: str) -> Path | None:
    """Reserve ``name`` in this attempt and pick its file in the output folder.

    One name, one output: a second ``output(name, ...)`` would overwrite the first (and lose
    a NaN recorded in between), so it is an error. File names are ``slug(name) + suffix``,
    injective because ``slug`` is and a suffix holds exactly one dot.
    """
    refuse_taken(rec, name)
    if rec.output_dir is None:
        return None
    return claim_path(rec, name, suffix)


def refuse_taken(rec: Recorder, name: str) -> None:
    if name in rec.outputs:
        raise ValueError(
            f"probe.output: output '{name}' was already recorded in this attempt; "
            "give every output its own name"
        )


def claim_path(rec: Recorder, name: str, suffix: str) -> Path:
    """The file of output ``name`` in the (existing) output folder."""
    assert rec.output_dir is not None
    if not rec.made_output_dir:
        rec.output_dir.mkdir(parents=True, exist_ok=True)
        rec.made_output_dir = True
    return rec.output_dir / f"{slug(name)}{suffix}"


def record_output(
    rec: Recorder, name: str, array_or_path: Any, encoded_from: str | Sequence[str], meta: Any
) -> None:
    """What :func:`harness.probe.output` records into ``rec`` (its docstring says what)."""
    clean_meta = {k: v for k, v in meta.items() if isinstance(v, str | int | float | bool)}
    if isinstance(array_or_path, str) and not os.path.isfile(array_or_path):
        raise FileNotFoundError(f"probe.output('{name}', ...): no such file: {array_or_path}")
    if _is_pathlike(array_or_path):
        src = Path(array_or_path)
        # Suffix-less files get ".bin", so every file name keeps exactly one dotted suffix.
        dst = claim(rec, name, src.suffix or ".bin")
        names = [encoded_from] if isinstance(encoded_from, str) else list(encoded_from)
        packets = muxed_by_harness(src) if names else None
        # Hashed where it lies when it is already the output's file (``output_file``).
        digest, size = copy_hashed(src, dst)
        if packets is not None and muxed_by_harness(src) != packets:
            packets = None  # changed while it was copied: demux the copy instead
        stored = dst or src
        from_arrays = sources_nonfinite(stored, names, rec.outputs, packets)
        nonfinite, why = _file_nonfinite(stored) if from_arrays is None else from_arrays[:2]
        entry: dict[str, Any] = {
            "kind": str(meta.get("kind", "file")),
            "hash": digest,
            "bytes": size,
            "nonfinite": nonfinite,
            "meta": clean_meta,
            "path": str(stored),
        }
        if from_arrays is not None:
            entry["nonfinite_from"] = from_arrays[2]
        if why is not None:
            entry["nonfinite_reason"] = why
            # A format the harness decodes that does not decode is a broken output (a failure);
            # a format it has no decoder for holds no numbers it could judge (not run).
            entry["corrupt"] = src.suffix.lower() in _DECODABLE
        rec.outputs[name] = entry
        return
    dst = claim(rec, name, ".safetensors")
    info, array = _describe(array_or_path)
    entry = {
        "kind": str(meta.get("kind", "tensor")),
        **{k: info[k] for k in ("hash", "dtype", "shape", "nonfinite", "min", "max")},
        "device": info["device"],
        "framework": info["framework"],
        "meta": clean_meta,
    }
    rec.output_arrays[name] = array
    if dst is not None:
        write_array(dst, array, metadata={k: str(v) for k, v in clean_meta.items()})
        entry["path"] = str(dst)
    rec.outputs[name] = entry


class OutputFile:
    """The context of :func:`output_file`."""

    def __init__(
        self,
        name: str,
        suffix: str,
        encoded_from: str | Sequence[str],
        meta: dict[str, Any],
        current: Callable[[], Recorder | None],
    ) -> None:
        self.name, self.suffix, self.encoded_from, self.meta = name, suffix, encoded_from, meta
        self.current = current
        self.path = Path()
        self.tmp: Any = None

    def __enter__(self) -> Path:
        rec = self.current()
        if rec is not None:
            refuse_taken(rec, self.name)  # before the block writes over that output's file
        if rec is not None and rec.output_dir is not None:
            self.path = claim_path(rec, self.name, self.suffix)
        else:
            import tempfile

            self.tmp = tempfile.TemporaryDirectory(prefix="harness-output-")
            self.path = Path(self.tmp.name) / f"{slug(self.name)}{self.suffix}"
        return self.path

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            if exc_type is not None:
                self.path.unlink(missing_ok=True)
                return
            if not self.path.is_file():
                raise FileNotFoundError(
                    f"probe.output_file('{self.name}', {self.suffix!r}): the block wrote no "
                    f"file at {self.path}"
                )
            rec = self.current()
            if rec is not None and rec.record_outputs:
                record_output(rec, self.name, self.path, self.encoded_from, self.meta)
            if self.tmp is not None and rec is not None and self.name in rec.outputs:
                rec.outputs[self.name].pop("path", None)  # removed with its folder below
        finally:
            if self.tmp is not None:
                self.tmp.cleanup()
