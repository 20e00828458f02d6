"""One resolution per side and platform: identity, devices, policy, reference chain and quality
thresholds are settled before a (side, platform)'s first attempt and carried by every attempt;
each case is prepared once, and judging a result looks its policy record up."""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from corecases import write_cases

from harness.cases import load_suite
from harness.cases.plan import build_plan
from harness.execution.paired import PairedRunner
from harness.execution.run import Runner, RunOptions
from harness.execution.workers import SideSpec
from harness.model import Side
from harness.platforms.policy import Policy
from harness.platforms.profile import Profile

# The calls into harness.platforms that resolve a platform or prepare a case, by the name
# harness.execution's modules bind them to.
RESOLVING = (
    "resolve_policy",  # the platform policy
    "threshold_chain",  # where thresholds are read (identity-dependent)
    "apply_quality",  # quality thresholds filled into a case
    "fill_thresholds",
    "check",  # the platform detected in the manager (fresh-process cases)
    "resolve_identity",
)

CASES = """
[[case]]
id = "one"
kind = "pipeline"
target = "tmod:ok"
repeats = 2

[[case]]
id = "two"
kind = "pipeline"
target = "tmod:ok"
params = { x = 2 }
repeats = 2

[[case]]
id = "three"
kind = "pipeline"
target = "tmod:ok"
params = { x = 3 }
repeats = 2

[[case.checks]]
metric = "note.path"
op = "=="
threshold = "eager"
"""


def count_resolving(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Count every call into the platform resolver from harness.execution's modules."""
    calls: Counter[str] = Counter()

    def counting(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return fn(*args, **kwargs)

        return wrapped

    for modname, mod in list(sys.modules.items()):
        if not modname.startswith("harness.execution"):
            continue
        for name in RESOLVING:
            fn = getattr(mod, name, None)
            if callable(fn):
                monkeypatch.setattr(mod, name, counting(name, fn))
    chain = Policy.reference_chain
    monkeypatch.setattr(Policy, "reference_chain", counting("reference_chain", chain))
    return calls


def options(project: Path) -> RunOptions:
    return RunOptions(
        profile=Profile(),
        out_root=project / "reports",
        code_roots=(str(project / "code"),),
        cwd=str(project),
        preimport=("numpy",),
    )


@pytest.mark.slow
def test_a_run_resolves_its_platform_once_and_each_case_once(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_cases(project, "three.toml", CASES)
    suite = load_suite([project / "cases"])
    calls = count_resolving(monkeypatch)
    runner = Runner(options(project))
    runner.run_plan(build_plan(suite.cases, ["cpu"]))
    report = runner.finish()
    assert [len(c.attempts) for c in report.cases] == [2, 2, 2]
    # one (side, platform): one policy, one reference chain, one threshold chain; three cases:
    # each prepared once (6 attempts and 3 judgings later)
    assert calls["resolve_policy"] == 1
    assert calls["reference_chain"] == 1
    assert calls["threshold_chain"] == 1
    assert calls["apply_quality"] + calls["fill_thresholds"] == 3
    # what the attempts carried is what the results are judged and recorded by
    three = next(c for c in report.cases if c.id == "three")
    assert (
        three.status == "passed"
        and three.policy["latency.on_fail"]["rule"] == "platform cpu default"
    )
    assert three.identity is not None and three.identity["platform"] == "cpu"


@pytest.mark.slow
def test_a_comparison_resolves_once_per_side_and_platform(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_cases(project, "three.toml", CASES)
    suite = load_suite([project / "cases"])
    code = (str(project / "code"),)
    sides: dict[Side, SideSpec] = {
        "base": SideSpec("base", code, cwd=str(project)),
        "head": SideSpec("head", code, cwd=str(project)),
    }
    calls = count_resolving(monkeypatch)
    runner = PairedRunner(options(project), sides)
    items = build_plan(suite.cases, ["cpu"])
    assert runner.run_rounds(items, 2) == 2
    reports = runner.reports(items)
    assert {s: [len(c.attempts) for c in r.cases] for s, r in reports.items()} == {
        "base": [2, 2, 2],
        "head": [2, 2, 2],
    }
    assert calls["resolve_policy"] == 1  # per platform
    assert calls["reference_chain"] == 2  # per (side, platform)
    assert calls["threshold_chain"] == 2
    assert calls["apply_quality"] + calls["fill_thresholds"] == 6  # per side and case


def test_resolver_probes_each_side_and_platform_once_and_judging_looks_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # unit level, no worker: the probe is a stand-in that answers for a simulated platform
    from harness.execution.devices import DeviceAssignment
    from harness.execution.resolution import Resolver

    project = tmp_path
    (project / "cases").mkdir()
    write_cases(project, "three.toml", CASES)
    items = build_plan(load_suite([project / "cases"]).cases, ["cpu", "hip"])
    asked: list[tuple[str, str]] = []

    def probe(spec: Any, platform: str, arch: str | None) -> tuple[bool, str, Any]:
        asked.append((spec.side, platform))
        return False, "stand-in", {"platform": platform, "arch": "gfx942", "simulated": True}

    said: list[str] = []
    prof = Profile()
    sides = {s: SideSpec(s, (str(project),)) for s in ("base", "head")}
    resolver = Resolver(
        profile=prof, sides=sides, devices=DeviceAssignment(prof), probe=probe, say=said.append
    )
    calls = count_resolving(monkeypatch)
    for _ in range(3):
        for side in ("base", "head"):
            for item in items:
                res = resolver.resolve(side, item.platform)
                resolver.prepared(res, item.case)
    assert sorted(asked) == sorted({(s, i.platform) for s in sides for i in items})
    hip = resolver.resolve("head", "hip")
    assert hip.threshold_chain[:2] == ("hip:gfx942", "hip")
    assert hip.simulated is not None and "stand-in" in hip.simulated
    assert sum("simulated" in line for line in said) == 4  # told once per side and platform
    before = dict(calls)
    judged = [resolver.judging(s, i) for s in sides for i in items]
    assert dict(calls) == before  # judging re-applies nothing
    assert all(j["policy_record"]["timeouts.attempt_scale"]["value"] for j in judged)
    # three passes over 2 sides x 2 platforms x 3 cases: each resolved or prepared once
    assert calls["resolve_policy"] == 2
    assert calls["threshold_chain"] == 4
    assert calls["fill_thresholds"] == 12


def test_json_dumps_writes_what_json_safe_then_dumps_wrote() -> None:
    import json
    import math

    from harness.model import json_dumps, json_safe

    class Odd:
        def __str__(self) -> str:
            return "odd"

    for doc in (
        {"a": 1.5, "b": (1, 2), "c": [{"d": None}], "e": Odd()},
        {"a": math.nan, "b": [math.inf, -math.inf], "c": {"d": (1.0, math.nan)}},
    ):
        want = json.dumps(json_safe(doc), allow_nan=False, default=str)
        assert json_dumps(doc) == want
