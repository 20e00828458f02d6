"""Where a run first left its layered reference: the record of one attempt's comparison, layer
by layer in recording order (inputs first, then the fingerprinted intermediates), and the one
line every report prints for it.

``reference_layers`` of an attempt in report.json (the contract ``harness explain`` reads)::

    {"reference": "t2va-int8", "status": "departed", "first_departure": "denoise.step01",
     "summary": "inputs identical (1 hash); 5 layers identical (text.context .. "
                "denoise.step00.audio); denoise.step01 rel L2 3.1e-3 > 1e-3: first departure",
     "layers": [{"name": "checkpoint", "kind": "input", "status": "identical",
                 "metric": "hash", "value": "blake3:...", "tolerance": null}, ...]}

Statuses: of a layer ``identical`` (same hash), ``within`` (differs, within its tolerance),
``departed``, ``missing`` (the reference has it, the run did not record it: a departure) and
``extra`` (the run recorded it, the reference has none: reported, not a departure); of the
whole ``identical``, ``within``, ``departed`` or ``no_layered_reference``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from harness.model.records import Attempt

__all__ = [
    "LAYERS_STATUSES",
    "LayerResult",
    "ReferenceLayers",
    "case_layers",
    "no_layered_reference",
    "short",
    "summarize",
]

LayerStatus = Literal["identical", "within", "departed", "missing", "extra"]
LayersStatus = Literal["identical", "within", "departed", "no_layered_reference"]
LAYERS_STATUSES: tuple[str, ...] = ("identical", "within", "departed", "no_layered_reference")
DEPARTED: frozenset[str] = frozenset({"departed", "missing"})


@dataclass(frozen=True)
class LayerResult:
    """One layer against its reference. ``value`` is the run's hash for an input (metric
    ``hash``), the relative L2 distance for a fingerprint (``rel_l2``; None when it could not be
    computed: see ``detail``)."""

    name: str
    kind: Literal["input", "fingerprint"]
    status: LayerStatus
    metric: Literal["rel_l2", "hash"]
    value: Any = None
    tolerance: float | None = None
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "name": self.name,
            "kind": self.kind,
            "status": self.status,
            "metric": self.metric,
            "value": self.value,
            "tolerance": self.tolerance,
        }
        if self.detail:
            d["detail"] = self.detail
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> LayerResult:
        return cls(
            name=str(d["name"]),
            kind=d["kind"],
            status=d["status"],
            metric=d["metric"],
            value=d.get("value"),
            tolerance=d.get("tolerance"),
            detail=str(d.get("detail", "")),
        )

    def phrase(self) -> str:
        """This layer in the summary line, e.g. ``denoise.step01 rel L2 3.1e-3 > 1e-3``."""
        if self.metric == "rel_l2" and isinstance(self.value, int | float):
            op = ">" if self.status == "departed" else "<="
            text = f"{self.name} rel L2 {short(self.value)} {op} {short(self.tolerance)}"
        elif self.status == "missing":
            text = f"{self.name} missing from the run"
        elif self.status == "departed" and self.kind == "input":
            text = f"input {self.name} differs"
        else:
            text = f"{self.name} {self.status}"
        return f"{text} ({self.detail})" if self.detail and self.status in DEPARTED else text


@dataclass(frozen=True)
class ReferenceLayers:
    """One attempt against the layered reference of its case (see the module docstring)."""

    reference: str
    status: LayersStatus
    first_departure: str | None
    summary: str
    layers: tuple[LayerResult, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "reference": self.reference,
            "status": self.status,
            "first_departure": self.first_departure,
            "summary": self.summary,
            "layers": [layer.to_json() for layer in self.layers],
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ReferenceLayers:
        return cls(
            reference=str(d.get("reference", "")),
            status=d["status"],
            first_departure=d.get("first_departure"),
            summary=str(d.get("summary", "")),
            layers=tuple(LayerResult.from_json(x) for x in d.get("layers", [])),
        )


def short(v: Any) -> str:
    """A distance or tolerance as the summary prints it: ``3.1e-3``, ``0.25``, ``0``."""
    if not isinstance(v, int | float) or isinstance(v, bool):
        return "-" if v is None else str(v)
    if v == 0 or not math.isfinite(v):
        return str(v) if v else "0"
    if 0.1 <= abs(v) < 1e3:
        return f"{v:.2g}"
    mantissa, exp = f"{v:.1e}".split("e")
    return f"{mantissa.removesuffix('.0')}e{int(exp)}"


def no_layered_reference(reference: str, why: str) -> ReferenceLayers:
    """The record of an attempt whose reference has no layers (or that recorded none)."""
    return ReferenceLayers(reference, "no_layered_reference", None, f"no layered reference: {why}")


def _names(layers: Sequence[LayerResult]) -> str:
    if len(layers) == 1:
        return layers[0].name
    return f"{layers[0].name} .. {layers[-1].name}"


def summarize(reference: str, layers: Sequence[LayerResult]) -> ReferenceLayers:
    """The record of ``layers`` (inputs first, then fingerprints, in recording order): its
    status, first departure and one-line summary, e.g. ``inputs identical (12 hashes);
    text.context within tolerance; denoise.step00 rel L2 3e-3 > 1e-3: first departure``."""
    inputs = [x for x in layers if x.kind == "input"]
    first = next((x for x in layers if x.status in DEPARTED), None)
    parts: list[str] = []
    if inputs and all(x.status == "identical" for x in inputs):
        parts.append(f"inputs identical ({len(inputs)} hash{'es' if len(inputs) != 1 else ''})")
    elif not inputs:
        parts.append("no inputs recorded")
    run: list[LayerResult] = []  # consecutive identical fingerprints, shown as one part

    def flush() -> None:
        if run:
            parts.append(
                f"{run[0].name} identical"
                if len(run) == 1
                else f"{len(run)} layers identical ({_names(run)})"
            )
            run.clear()

    for x in layers:
        if x is first:
            break
        if x.kind == "input":
            if x.status != "identical":
                parts.append(x.phrase())
            continue
        if x.status == "identical":
            run.append(x)
            continue
        flush()
        parts.append(
            f"{x.name} within tolerance (rel L2 {short(x.value)} <= {short(x.tolerance)})"
            if x.status == "within" and isinstance(x.value, int | float)
            else x.phrase()
        )
    flush()
    if first is not None:
        parts.append(f"{first.phrase()}: first departure")
        later = [x for x in layers if x.status in DEPARTED and x is not first]
        if later:
            parts.append(f"{len(later)} later layer{'s' if len(later) != 1 else ''} departed")
        status: LayersStatus = "departed"
    elif all(x.status in ("identical", "extra") for x in layers):
        status = "identical"
    else:
        status = "within"
    if first is None:
        parts.append("no departure" if status == "within" else "every layer identical")
    extra = [x.name for x in layers if x.status == "extra"]
    if extra:
        parts.append(f"not in the reference: {', '.join(extra)}")
    return ReferenceLayers(
        reference, status, first.name if first else None, "; ".join(parts), tuple(layers)
    )


def case_layers(attempts: Sequence[Attempt]) -> ReferenceLayers | None:
    """The ``reference_layers`` a case's reports show: the last attempt's that has one (a
    failing attempt's before a passing one's), or None."""
    carrying = [a for a in attempts if a.reference_layers is not None]
    failing = [a for a in carrying if a.status != "passed"]
    chosen = (failing or carrying)[-1:]
    return chosen[0].reference_layers if chosen else None
