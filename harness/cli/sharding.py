"""What ``plan --shards`` and ``run --shard`` share: the options that fix a split, and the split.

Every CI machine computes the split on its own, so each must be given the same options: the
same cases, ``-k`` and platforms, the same ``--durations`` files and ``--shard-by`` rule.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path

from harness import platforms
from harness.cases import PlanItem
from harness.cases.shard import BATCH_RULES, ShardPlan, plan_nonce, recorded_durations, split
from harness.errors import UsageError
from harness.report.io import read_report


def add_split_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--durations",
        action="append",
        type=Path,
        default=None,
        metavar="REPORT",
        help="a previous report.json (or run folder) whose attempt seconds set the expected "
        "duration of each case (repeatable; cases it lacks are estimated, and the plan says how)",
    )
    p.add_argument(
        "--plan-nonce",
        metavar="TEXT",
        help="the same text on every shard of one plan, recorded in each report; harness merge "
        "refuses shards whose nonces differ (default: $HARNESS_PLAN_NONCE, else the CI run's "
        "id: GITHUB_RUN_ID, CI_PIPELINE_ID, BUILDKITE_BUILD_ID)",
    )
    p.add_argument(
        "--shard-by",
        choices=BATCH_RULES,
        default="case",
        help="what stays together on one shard: a case with its repeats (default), every case "
        "of one case file, or every case of one kind",
    )


def shard_plan(args: argparse.Namespace, items: Sequence[PlanItem], count: int) -> ShardPlan:
    reports = [read_report(path) for path in args.durations or ()]
    nonce = plan_nonce(args.plan_nonce, os.environ)
    return split(
        items,
        count,
        recorded_durations(reports),
        by=args.shard_by,
        nonce=nonce,
        pinned=pinning_platforms(),
    )


def pinning_platforms() -> frozenset[str]:
    """The platforms that pin a worker to devices (a rank there takes a device slot)."""
    return frozenset(n for n in platforms.known() if platforms.get(n).visible_devices_env)


def check_split_args(args: argparse.Namespace, sharded: bool, needs: str) -> None:
    """--durations and --shard-by shape a split: without one (``needs``) they would be ignored."""
    if sharded:
        return
    given = [
        name
        for name, set_ in (
            ("--durations", bool(args.durations)),
            ("--shard-by", args.shard_by != "case"),
            ("--plan-nonce", args.plan_nonce is not None),
        )
        if set_
    ]
    if given:
        raise UsageError(f"{' and '.join(given)}: only with {needs}, which they shape")
