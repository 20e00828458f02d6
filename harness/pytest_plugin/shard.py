"""The plugin's sharding options: ``pytest harness/ --harness-shard i/N`` collects one part of
the plan split by expected duration, exactly as ``harness run --shard i/N`` runs it.

Import-light like the rest of the plugin: the harness modules load only when an option is set.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from harness.cases.plan import PlanItem
    from harness.model import ShardInfo

SHARD_KEY: pytest.StashKey[ShardInfo] = pytest.StashKey()


def add_shard_options(group: pytest.OptionGroup) -> None:
    group.addoption(
        "--harness-shard",
        metavar="I/N|auto",
        default=None,
        help="collect only part I of the cases split over N machines by expected duration "
        "(like harness run --shard I/N; merge the reports with harness merge); auto: from the "
        "CI engine's variables, as harness run --shard auto",
    )
    group.addoption(
        "--harness-durations",
        metavar="REPORT",
        action="append",
        default=None,
        help="with --harness-shard: a previous report.json whose seconds shape the split",
    )
    group.addoption(
        "--harness-plan-nonce",
        metavar="TEXT",
        default=None,
        help="with --harness-shard: the same text on every shard of one plan (default: "
        "$HARNESS_PLAN_NONCE, else the CI run's id); harness merge refuses shards whose differ",
    )
    group.addoption(
        "--harness-shard-by",
        metavar="RULE",
        default="case",
        choices=("case", "file", "kind"),
        help="with --harness-shard: what stays on one shard (case, file or kind)",
    )
    group.addoption(
        "--harness-fail-fast",
        action="store_true",
        default=False,
        help="stop starting cases after the first that fails; the report lists the rest",
    )


def check_shard_option(config: pytest.Config) -> None:
    """A bad --harness-shard is a usage error before anything is collected."""
    spec = config.getoption("harness_shard")
    if spec is None:
        return
    from harness.cases.shard_env import resolve_shard
    from harness.errors import UsageError

    try:
        resolve_shard(spec, os.environ, "--harness-shard")
    except UsageError as exc:
        raise pytest.UsageError(str(exc)) from None


def select_shard(config: pytest.Config, plan: Sequence[PlanItem]) -> list[PlanItem]:
    """The plan items of this shard (all of them without --harness-shard); the shard's info is
    stashed for the run's report."""
    spec = config.getoption("harness_shard")
    if spec is None:
        return list(plan)
    from pathlib import Path

    from harness.cases.shard import plan_nonce, recorded_durations, split
    from harness.cases.shard_env import resolve_shard
    from harness.report.io import read_report

    told = resolve_shard(spec, os.environ, "--harness-shard")
    index, count = told.index, told.count
    reports = [read_report(Path(p)) for p in config.getoption("harness_durations") or ()]
    nonce = plan_nonce(config.getoption("harness_plan_nonce"), os.environ)
    by = config.getoption("harness_shard_by")
    cut = split(plan, count, recorded_durations(reports), by=by, nonce=nonce)
    config.stash[SHARD_KEY] = cut.info(index, told.source)
    return cut.items_of(index)
