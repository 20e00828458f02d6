"""A validated case and its declared checks, as frozen records (loaded by :mod:`harness.cases`).

``case_to_json`` / ``case_from_json`` carry a case across the worker protocol.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, Literal

from harness.model.server import RequestSpec, ServerSpec
from harness.model.vocab import FrameSpec, display_name


@dataclass(frozen=True)
class CheckSpec:
    """One declared check: ``metric op threshold``, per-platform thresholds, a policy."""

    metric: str
    op: str
    threshold: Any
    thresholds: Mapping[str, Any] = field(default_factory=dict)
    policy: Literal["fail", "warn"] = "fail"
    output: str | None = None
    frames: FrameSpec | None = None
    reduce: Literal["worst", "mean"] = "worst"
    name: str = ""
    settings: Mapping[str, Any] = field(default_factory=dict)
    # The check asserts what ran on the device (not what was decided): under a simulated
    # platform it is "not run: simulated" and never blocks the case.
    needs_device: bool = False

    def threshold_for(self, platform_chain: Iterable[str]) -> Any:
        """The threshold of the most specific platform in the chain that names one (a chain may
        hold ``platform:arch`` entries, e.g. ``hip:gfx950``, before the platform)."""
        for p in platform_chain:
            if p in self.thresholds:
                return self.thresholds[p]
        return self.threshold


@dataclass(frozen=True)
class Case:
    """One validated case. ``source`` is the file it came from, ``line`` the 1-based line of its
    table there (the ``[[case]]`` header, or the ``id`` key of a one-case file; 0 unknown)."""

    id: str
    kind: str
    source: str
    target: str | None = None
    command: tuple[str, ...] | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    seed: int = 0
    platforms: tuple[str, ...] | Literal["any"] = "any"
    repeats: int = 1
    retries: int | None = None
    warmup: int = 0
    timeout_s: float = 300.0
    fresh_process: bool = False
    checks: tuple[CheckSpec, ...] = ()
    reference: str | None = None
    frames: FrameSpec = "first-mid-last"
    budget: Mapping[str, float] = field(default_factory=dict)
    description: str = ""
    tags: tuple[str, ...] = ()
    line: int = 0
    # A folder of the repository (relative to its root) put on the worker's import path for
    # this case, ahead of the run's code roots: the case's own scenario package.
    code_root: str | None = None
    # Modules the case needs; where the worker's Python cannot find one, the case is skipped
    # with that reason (never passed, never left out of the report).
    requires: tuple[str, ...] = ()
    # Packages a coverage attempt of this case measures besides the side's code roots.
    coverage_packages: tuple[str, ...] = ()
    # Why the case is known to fail intermittently (an issue link, say): a failure that head
    # shows and base did not, intermittently, then reads ``flaky`` in a comparison instead of
    # ``new_failure``, and the comparison records this reason. None: not declared.
    known_flaky: str | None = None
    # A ``kind = "server"`` case: the server it starts and the requests it sends (None / ()
    # for every other kind).
    server: ServerSpec | None = None
    requests: tuple[RequestSpec, ...] = ()
    # A multi-rank case (``ranks`` > 1, pipeline and quant kinds): the target runs in one
    # process per rank (harness.worker.ranks_case); ``replicated`` holds the fnmatch patterns
    # of the fingerprints every rank must record alike (the rank-consistency check).
    ranks: int = 1
    replicated: tuple[str, ...] = ()

    def display(self, platform: str) -> str:
        """``<kind>/<id>[<platform>]``, the name used by pytest items and reports."""
        return display_name(self.kind, self.id, platform)

    def runs_on(self, platform: str) -> bool:
        return self.platforms == "any" or platform in self.platforms

    @property
    def rank_count(self) -> int:
        """How many processes run the code under test: ``ranks``, or a server case's
        ``[case.server] ranks``. Where the platform pins devices each needs a device of its own
        (a shard plan's device slots, the devices its worker owns)."""
        return self.server.ranks if self.server is not None else self.ranks


_SCALARS = (str, int, float, bool, type(None))
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _plain(value: Any) -> Any:
    """What ``dataclasses.asdict`` makes of ``value``, without its deep copy of every scalar
    (a case is converted once per side and platform, then sent with each attempt: asdict was
    ~0.3 ms of a trivial case's 3 ms through ``harness run``)."""
    if isinstance(value, _SCALARS):
        return value
    kind = type(value)
    if kind is list or kind is tuple:
        return kind(_plain(v) for v in value)
    if kind is dict:
        return {_plain(k): _plain(v) for k, v in value.items()}
    if is_dataclass(value) and not isinstance(value, type):
        names = _FIELD_NAMES.get(kind)
        if names is None:
            names = _FIELD_NAMES[kind] = tuple(f.name for f in fields(value))
        return {name: _plain(getattr(value, name)) for name in names}
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a named tuple, as asdict
        return kind(*(_plain(v) for v in value))
    if isinstance(value, list | tuple):
        return kind(_plain(v) for v in value)
    if isinstance(value, dict):
        return kind((_plain(k), _plain(v)) for k, v in value.items())
    return copy.deepcopy(value)


def case_to_json(case: Case) -> dict[str, Any]:
    """A case as plain JSON, to hand to a worker process (``dataclasses.asdict`` of it)."""
    d: dict[str, Any] = _plain(case)
    d["platforms"] = case.platforms if case.platforms == "any" else list(case.platforms)
    return d


def case_from_json(d: Mapping[str, Any]) -> Case:
    """Inverse of :func:`case_to_json`."""
    kw = dict(d)
    kw["checks"] = tuple(
        CheckSpec(
            **{
                **c,
                "frames": tuple(c["frames"])
                if isinstance(c.get("frames"), list)
                else c.get("frames"),
            }
        )
        for c in d.get("checks", ())
    )
    kw["command"] = tuple(d["command"]) if d.get("command") is not None else None
    kw["platforms"] = d["platforms"] if d["platforms"] == "any" else tuple(d["platforms"])
    kw["frames"] = tuple(d["frames"]) if isinstance(d.get("frames"), list) else d["frames"]
    kw["tags"] = tuple(d.get("tags", ()))
    kw["requires"] = tuple(d.get("requires", ()))
    kw["coverage_packages"] = tuple(d.get("coverage_packages", ()))
    kw["replicated"] = tuple(d.get("replicated", ()))
    kw["server"] = ServerSpec.from_json(d["server"]) if d.get("server") is not None else None
    kw["requests"] = tuple(RequestSpec.from_json(r) for r in d.get("requests", ()))
    return Case(**kw)
