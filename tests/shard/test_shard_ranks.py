"""What a plan knows of a case's ranks and devices: ``harness plan --shards`` shows each case's
rank count and device slots (one per rank where the platform pins devices) and each shard's
widest need, warns when the runner profile shares out fewer; a multi-rank case's worker owns
one device per rank."""

from __future__ import annotations

import json

import pytest

from harness.cases.plan import PlanItem
from harness.cases.shard import Needs, split
from harness.cli.plan import device_warnings, print_split, split_json
from harness.cli.sharding import pinning_platforms
from harness.execution.devices import DeviceAssignment
from harness.model import Case
from harness.model.server import ServerSpec
from harness.platforms.profile import Profile


def item(cid: str, platform: str, **kw: object) -> PlanItem:
    kind = "server" if "server" in kw else "pipeline"
    target = None if kind == "server" else "m:f"
    case = Case(id=cid, kind=kind, source="cases/a.toml", target=target, **kw)  # type: ignore[arg-type]
    return PlanItem(case, platform)


ITEMS = [
    item("tp2", "cuda", ranks=2),
    item("serve-tp2", "cuda", server=ServerSpec(command=("x",), ranks=2)),
    item("one", "cuda"),
    item("tp2", "cpu", ranks=2),
]


def test_each_item_needs_a_device_slot_per_rank_where_devices_are_pinned() -> None:
    assert {"cuda", "hip", "npu"} <= pinning_platforms() and "cpu" not in pinning_platforms()
    plan = split(ITEMS, 2, pinned=pinning_platforms())
    assert [plan.need_of(i) for i in range(4)] == [
        Needs(2, 2),  # ranks = 2 on a GPU: two device slots
        Needs(2, 2),  # a server's [case.server] ranks, likewise
        Needs(1, 1),
        Needs(2, 0),  # the CPU pins nothing
    ]
    # a shard needs as many slots as its widest case; the split itself still balances seconds
    assert sorted(plan.devices_of(i) for i in (1, 2)) == [2, 2]
    assert plan.digest == split(ITEMS, 2).digest


def test_plan_json_and_text_show_ranks_and_devices(capsys: pytest.CaptureFixture[str]) -> None:
    plan = split(ITEMS, 1, pinned=pinning_platforms())
    doc = json.loads(json.dumps(split_json(plan)))
    (shard,) = doc["shards"]
    assert shard["devices"] == 2
    got = {(c["name"], c["ranks"], c["devices"]) for c in shard["cases"]}
    assert ("pipeline/tp2[cuda]", 2, 2) in got and ("pipeline/tp2[cpu]", 2, 0) in got
    print_split(plan)
    out = capsys.readouterr().out
    assert "shard 1/1: 4 case(s), " in out and "needs 2 device slot(s)" in out
    assert "pipeline/tp2[cuda]  30.00 s  ranks=2 devices=2" in out
    assert "server/serve-tp2[cuda]  30.00 s  ranks=2 devices=2" in out


def test_a_profile_with_fewer_devices_than_a_shards_ranks_is_warned() -> None:
    plan = split(ITEMS, 1, pinned=pinning_platforms())
    small = Profile(name="h100", platform="cuda", device_count=1, source="runners/h100.toml")
    (line,) = device_warnings(plan, small)
    assert line.startswith("shard 1/1 needs 2 device slots on cuda (one per rank)")
    assert "runners/h100.toml has device_count = 1" in line
    assert device_warnings(plan, Profile(platform="cuda", device_count=2)) == []
    assert device_warnings(plan, Profile()) == []  # the CPU profile shares out no device


def test_a_multi_rank_case_s_worker_owns_one_device_per_rank() -> None:
    four = DeviceAssignment(Profile(platform="cuda", device_count=4))
    assert four.for_ranks((1,), 2) == (1, 2)
    assert four.for_ranks((3,), 2) == (3, 0)  # wraps around the profile's devices
    assert four.for_ranks((1,), 1) == (1,)
    assert four.for_ranks((), 2) == ()  # not pinned (the CPU): nothing to widen
    one = DeviceAssignment(Profile(platform="cuda", device_count=1))
    assert one.for_ranks((0,), 2) == (0,)  # fewer than ranks: they share it
