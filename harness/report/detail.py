"""A run page's case details as data: the tables a case shows when it is opened (checks,
attempts and their errors, a timeout's hang diagnosis, stage latencies, inputs, fingerprints,
notes), as rows of display strings, drawn by the page's own script (``report.js``) with
``textContent`` only, so a string from a case is always text. Every string is stored once in a
shared table and rows refer to it by number: a thousand cases repeat the same stage, tensor and
check names thousands of times.

The whole is one ``<script type="application/json">`` block (data, never run) with ``<``, ``>``
and ``&`` written as ``\\u003c``, ``\\u003e`` and ``\\u0026``, so no string can close the block.

Example::

    strings = Strings()
    page_data(strings, [case_detail(c, logs, strings) for c in report.cases])
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from markupsafe import Markup

from harness.model import Attempt, CaseResult, CheckResult, fmt_number
from harness.report.shown import judged_attempt


class Logs(Protocol):
    """Where an attempt's worker log tails come from (:class:`harness.report.html.Logs`)."""

    def for_attempt(self, a: Attempt) -> list[tuple[str, str]]: ...


def seconds(v: Any) -> str:
    """Seconds as a report shows them: ms below one second."""
    if not isinstance(v, int | float) or isinstance(v, bool):
        return "-"
    return f"{v * 1e3:.3g} ms" if abs(v) < 1 else f"{v:.3g} s"


def short_hash(h: Any) -> str:
    """``blake3:e125c8e983e0...`` -> ``e125c8e983e0`` (the full hash is in the JSON)."""
    text = str(h or "-")
    return text.split(":", 1)[-1][:12]


class Strings:
    """Each distinct string once; ``strings(text)`` is its number in :attr:`table`."""

    def __init__(self) -> None:
        self._index: dict[str, int] = {}  # in the order first seen: the table's order

    @property
    def table(self) -> list[str]:
        return list(self._index)

    def __call__(self, text: str) -> int:
        return self._index.setdefault(text, len(self._index))

    def row(self, cells: Iterable[str]) -> list[int]:
        index = self._index
        return [index.setdefault(c, len(index)) for c in cells]


def _result(k: CheckResult) -> str:
    if k.contention:
        return "contention"
    return {True: "passed", False: "failed", None: "not run"}[k.passed]


def check_settings(settings: Mapping[str, Any]) -> str:
    """A check's settings on one line, less the compared frame list (the gallery shows it)."""
    return ", ".join(
        f"{k}={fmt_number(v)}"
        for k, v in sorted(settings.items())
        if k not in ("frames", "reference_blessed") and v not in ("", None)
    )


def _run(a: Attempt) -> str:
    if a.warmup:
        return "warm-up"
    return f"repeat {a.repeat}" + (f", retry {a.retry}" if a.retry else "")


def _error(a: Attempt, logs: Logs, s: Strings) -> list[Any] | None:
    """type, message, signature, stack, [[log file, tail], ...]: the table shows the type and
    the message's first line; the rest is one click away."""
    e = a.error
    if e is None:
        return None
    tails = [s.row(pair) for pair in logs.for_attempt(a)]
    return [s(e.type), s(e.message), s(e.signature), s(e.traceback), tails]


def _hang(a: Attempt, s: Strings) -> list[Any]:
    """title, device report, and per process: pid, rank, CPU %, log growing, last log line
    (age), where, stack method, stack, why better methods were not used."""
    d = a.hang
    assert d is not None
    retry = a.retried_because or a.not_retried
    title = (
        f"hang diagnosis, attempt #{a.index}: {d.trigger}, {len(d.processes)} process(es), "
        f"captured in {d.seconds:.1f} s (deadline {d.deadline_s:g} s) before the kill"
        + (f"; {retry}" if retry else "")
        + (f"; {d.unfinished}" if d.unfinished else "")
    )
    device = f"device ({d.device_tool}): {d.device}" if d.device_tool else f"device: {d.device}"
    rows = []
    for p in d.processes:
        age = f" ({p.last_line_age_s:.1f} s ago)" if p.last_line_age_s is not None else ""
        growing = {None: "no log", False: "no"}.get(p.log_growing, f"yes (+{p.log_grew_bytes} B)")
        rows.append(
            s.row(
                [
                    str(p.pid),
                    str(p.rank) if p.rank is not None else "?",
                    f"{p.cpu_percent:g}" if p.cpu_percent is not None else "?",
                    growing,
                    (p.last_line + age) if p.last_line else "-",
                    p.where or "-",
                    p.stack_method,
                    p.stack,
                    p.stack_notes,
                ]
            )
        )
    return [s(title), s(device), rows]


def _ranks(c: CaseResult, s: Strings) -> list[Any] | None:
    """title, column heads, and per stage: name, slowest rank, its seconds, every rank's, from
    the attempt summary.md shows (:func:`harness.report.ranks_md.ranks_attempt`)."""
    from harness.model.ranks import slowest
    from harness.report.ranks_md import ranks_attempt

    a = ranks_attempt(c)
    if a is None or a.ranks is None:
        return None
    r = a.ranks
    ranks = sorted(int(k) for k in r.stages)
    exits = ", ".join(
        f"rank {k}: {v}" for k, v in sorted(r.exits.items(), key=lambda kv: int(kv[0]))
    )
    title = f"ranks, attempt #{a.index}: {r.world_size} ranks ({exits})" + (
        f"; rank consistency: {r.consistency}" if r.consistency else ""
    )
    heads = s.row(["stage", "slowest rank", "seconds", *(f"rank {k}" for k in ranks)])
    rows = [
        s.row([stage, str(rank), seconds(secs), *(seconds(every.get(k)) for k in ranks)])
        for stage, rank, secs, every in slowest(r)
    ]
    return [s(title), heads, rows]


def _layers(c: CaseResult, s: Strings) -> list[Any] | None:
    """title (the one-line summary) and per layer: name, kind, status (the first departure
    marked), metric, value, tolerance, detail (:func:`harness.model.layers.case_layers`)."""
    from harness.model.layers import case_layers, short

    layers = case_layers(c.attempts)
    if layers is None:
        return None
    rows = [
        s.row(
            [
                x.name,
                x.kind,
                x.status + (" (first departure)" if x.name == layers.first_departure else ""),
                x.metric.replace("_", " "),
                short_hash(x.value) if x.metric == "hash" else short(x.value),
                short(x.tolerance),
                x.detail,
            ]
        )
        for x in layers.layers
    ]
    return [s(f"reference layers ({layers.reference}): {layers.summary}"), rows]


def case_detail(c: CaseResult, logs: Logs, s: Strings) -> dict[str, Any]:
    """What the page draws when case ``c`` is opened; empty tables are left out."""
    d: dict[str, Any] = {
        "meta": s.row([c.source or "-", fmt_number(c.seed), str(c.repeats), str(c.reference or "")])
    }
    if c.reason:
        d["reason"] = s(c.reason)
    if c.contention:
        d["contention"] = [s.row([k.name, k.reason or ""]) for k in c.contention]
    d["checks"] = [
        s.row(
            [
                k.name,
                fmt_number(k.value),
                f"{k.op} {fmt_number(k.threshold)}",
                k.policy,
                _result(k),
                k.reason or "",
                check_settings(k.settings),
            ]
        )
        for k in c.checks
    ]
    if c.attempts:
        d["attempts"] = [
            [
                *s.row(
                    [
                        str(a.index),
                        _run(a),
                        a.status,
                        seconds(a.duration_s),
                        fmt_number(a.seed),
                        fmt_number(a.worker_pid),
                        a.started_at,
                    ]
                ),
                _error(a, logs, s),
            ]
            for a in c.attempts
        ]
    hangs = [_hang(a, s) for a in c.attempts if a.hang is not None]
    if hangs:
        d["hangs"] = hangs
    ranks = _ranks(c, s)
    if ranks is not None:
        d["ranks"] = ranks
    layers = _layers(c, s)
    if layers is not None:
        d["layers"] = layers
    stage_names = list(dict.fromkeys(st for a in c.attempts for st in a.stages))
    if stage_names:
        d["stages"] = [
            s.row([st, *(seconds(a.stages.get(st)) for a in c.attempts)]) for st in stage_names
        ]
    measured = [a for a in c.attempts if not a.warmup] or list(c.attempts)
    shown = judged_attempt(c) or (c.attempts[-1] if c.attempts else None)
    if shown is None:
        return d
    if shown.inputs:
        d["inputs"] = [
            s.row([name, h, "yes" if all(a.inputs.get(name) == h for a in measured) else "NO"])
            for name, h in shown.inputs.items()
        ]
    passing = [a for a in measured if a.status == "passed"]
    fps = []
    for name, fp in shown.fingerprints.items():
        same = all((a.fingerprints.get(name) or {}).get("hash") == fp.get("hash") for a in passing)
        shape = ",".join(str(n) for n in fp.get("shape") or [])
        fps.append(
            s.row(
                [
                    name,
                    short_hash(fp.get("hash")),
                    f"{fp.get('dtype', '-')}[{shape}]",
                    *(fmt_number(fp.get(k)) for k in ("nonfinite", "min", "max", "mean")),
                    "yes" if same else "NO",
                ]
            )
        )
    if fps:
        d["fps"] = fps
    if shown.notes:
        d["notes"] = [s.row([k, fmt_number(v)]) for k, v in shown.notes.items()]
    return d


def page_data(strings: Strings, cases: Sequence[Mapping[str, Any]]) -> Markup:
    """The JSON block's text: safe inside ``<script type="application/json">``."""
    text = json.dumps(
        {"strings": strings.table, "cases": cases}, ensure_ascii=False, separators=(",", ":")
    )
    return Markup(text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e"))


def decode(page: str) -> list[dict[str, Any]]:
    """The case details of a rendered run page with every string number replaced by its string:
    what the page's script draws, for a test or a tool to read without a browser."""
    start = page.index('<script type="application/json" id="case-data">')
    text = page[page.index(">", start) + 1 : page.index("</script>", start)]
    doc = json.loads(text)
    strings = doc["strings"]

    def fill(v: Any) -> Any:
        if isinstance(v, list):
            return [fill(x) for x in v]
        return strings[v] if isinstance(v, int) else v

    return [{k: fill(v) for k, v in c.items()} for c in doc["cases"]]
