"""The Markdown of where a run left its layered reference (``Attempt.reference_layers``), for
``summary.md``: per case that carries one, its one-line summary and a table of its layers in
recording order, the first departure marked (:mod:`harness.model.layers`)."""

from __future__ import annotations

from collections.abc import Iterator

from harness.model import CaseResult
from harness.model.layers import ReferenceLayers, case_layers, short
from harness.report.markdown import md_code, md_text, row

MAX_ROWS = 24  # a long denoise loop: the rows up to a few past the first departure


def _rows(layers: ReferenceLayers) -> Iterator[str]:
    shown = list(layers.layers)
    names = [x.name for x in shown]
    if layers.first_departure in names and len(shown) > MAX_ROWS:
        stop = min(len(shown), max(names.index(layers.first_departure) + 3, MAX_ROWS))
        shown = shown[:stop]
    for x in shown[:MAX_ROWS]:
        mark = " ⬅ first departure" if x.name == layers.first_departure else ""
        value = x.value if x.metric == "hash" else short(x.value)
        yield row(
            [
                md_code(x.name),
                x.kind,
                md_text(x.status + mark),
                x.metric.replace("_", " "),
                md_code(value, limit=24) if x.metric == "hash" and value else md_text(value or "-"),
                short(x.tolerance) if x.tolerance is not None else "-",
                md_text(x.detail),
            ]
        )
    if len(layers.layers) > len(shown[:MAX_ROWS]):
        yield row([f"... {len(layers.layers) - len(shown[:MAX_ROWS])} more in report.json"])


def layers_lines(case: CaseResult, *, table: bool) -> Iterator[str]:
    """The Markdown lines of ``case``'s comparison with its layered reference (none when no
    attempt was compared); ``table`` adds the layers."""
    layers = case_layers(case.attempts)
    if layers is None:
        return
    yield f"**Reference layers** of {md_code(case.name, table=False)}: " + md_text(layers.summary)
    if not table or not layers.layers:
        return
    yield ""
    yield row(["layer", "kind", "status", "metric", "value", "tolerance", "detail"])
    yield "|---|---|---|---|---|---|---|"
    yield from _rows(layers)
