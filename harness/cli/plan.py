"""``harness plan``: show what ``harness run`` would run, without running it; with
``--shards N``, how the cases split over N CI machines by expected duration."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from harness.cases import build_plan
from harness.cases.shard import Needs, ShardPlan, check_shard_count
from harness.cli.emit import ENGINES, emit, shard_command
from harness.cli.sharding import add_split_args, check_split_args, shard_plan
from harness.cli.suite import add_suite_args, load, platforms
from harness.errors import UsageError
from harness.platforms.profile import Profile, resolve_profile

PLAN_EXAMPLE = """\
examples:
  harness plan cases/ -k loader
  harness plan --shards 4 --durations reports/latest      # per shard: cases, expected seconds
  harness plan --shards 4 --durations reports/latest --json
  harness plan --shards 4 --emit github > .github/workflows/harness.yml
  harness plan --shards 8 --runner h100 --emit k8s-job --image registry.example/stack:ci
  harness plan --shards 4 --emit buildkite | buildkite-agent pipeline upload
"""


def add_parser(sub: Any) -> None:
    plan = sub.add_parser(
        "plan",
        help="show what `harness run` would run, without running it",
        epilog=PLAN_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_suite_args(plan)
    plan.add_argument(
        "--shards",
        type=int,
        metavar="N",
        help="split the cases over N CI machines by expected duration (run one part with "
        "`harness run --shard i/N` and the same options)",
    )
    add_split_args(plan)
    plan.add_argument("--json", action="store_true", help="with --shards: the split as JSON")
    plan.add_argument(
        "--emit",
        choices=ENGINES,
        help="with --shards: print the engine's job for the plan (a Kubernetes Indexed Job, a "
        "Buildkite step with parallelism, a GitHub Actions matrix), each shard running "
        "`harness run ... --shard auto`",
    )
    plan.add_argument(
        "--image",
        metavar="IMAGE",
        help="with --emit k8s-job (required) or github: the container image the shards run in "
        "(this checkout at its working directory, the harness installed); pin it by digest, "
        "IMAGE@sha256:...",
    )
    plan.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    if args.shards is not None:
        check_shard_count(args.shards)
    check_split_args(args, args.shards is not None, "--shards N")
    if args.json and args.shards is None:
        raise UsageError("--json: only with --shards N (the split as JSON)")
    if args.emit and args.shards is None:
        raise UsageError(f"--emit {args.emit}: only with --shards N (the job runs N shards)")
    if args.emit and args.json:
        raise UsageError(f"--emit {args.emit} and --json: pick one (both print to stdout)")
    if args.image and not args.emit:
        raise UsageError("--image: only with --emit k8s-job or github")
    profile = resolve_profile(args.runner, Path("runners"))
    suite = load(args.paths)
    for err in suite.errors:
        print(f"error: {err}", file=sys.stderr)
    items = build_plan(suite.cases, platforms(args, profile.platform), args.keyword)
    if args.shards is not None:
        split = shard_plan(args, items, args.shards)
        for line in device_warnings(split, profile):
            print(f"warning: {line}", file=sys.stderr)
        if args.emit:
            emitted = emit(args.emit, split, shard_command(args), image=args.image, profile=profile)
            for note in emitted.notes:
                print(f"note: {note}", file=sys.stderr)
            sys.stdout.write(emitted.text)
        elif args.json:
            print(json.dumps(split_json(split), indent=2))
        else:
            print_split(split)
    else:
        for item in items:
            c = item.case
            extra = f"  (skipped: {item.skip_reason})" if item.skip_reason else ""
            print(
                f"{item.name}  repeats={c.repeats} warmup={c.warmup} seed={c.seed}"
                f"{' fresh_process' if c.fresh_process else ''}{extra}"
            )
    print(f"{len(items)} item(s), {len(suite.errors)} bad case file(s)", file=sys.stderr)
    if suite.errors:
        return 2
    if not any(item.skip_reason is None for item in items):
        # The same answer `harness run` would give: nothing would run (exit 5), and why.
        why = (
            f"-k {args.keyword!r} matches none of the {len(suite.cases)} case(s)"
            if args.keyword and not items
            else "no case selected"
            if not items
            else f"all {len(items)} selected item(s) would be skipped"
        )
        print(f"nothing would run: {why} (exit 5)", file=sys.stderr)
        return 5
    return 0


def device_warnings(split: ShardPlan, profile: Profile) -> list[str]:
    """A shard whose items need more device slots than the runner profile shares out: its
    ranks would share devices (round robin), which a collective backend may refuse."""
    have = profile.device_count
    if have < 1:
        return []
    out = []
    for index in range(1, split.count + 1):
        wants = max(
            (
                split.need_of(i).devices
                for i, (it, s) in enumerate(zip(split.items, split.shard_of, strict=True))
                if s == index and it.platform == profile.platform
            ),
            default=0,
        )
        if wants > have:
            out.append(
                f"shard {index}/{split.count} needs {wants} device slots on {profile.platform} "
                f"(one per rank), but {profile.source or 'the runner profile'} has device_count "
                f"= {have}: its ranks would share devices"
            )
    return out


def split_json(split: ShardPlan) -> dict[str, Any]:
    loads = split.loads()
    return {
        "count": split.count,
        "by": split.by,
        "plan_digest": split.digest,
        "plan_nonce": split.nonce,
        "total_s": round(sum(loads), 6),
        "ideal_s": round(split.ideal_s(), 6),
        "estimated": sum(1 for e in split.expected if e.estimate is not None),
        "shards": [
            {
                "index": index,
                "expected_s": round(loads[index - 1], 6),
                "devices": split.devices_of(index),
                "cases": [
                    {
                        "name": it.name,
                        "id": it.case.id,
                        "kind": it.case.kind,
                        "platform": it.platform,
                        "expected_s": round(e.seconds, 6),
                        "estimate": e.estimate,
                        "ranks": split.need_of(i).ranks,
                        "devices": split.need_of(i).devices,
                    }
                    for i, (it, e, s) in enumerate(
                        zip(split.items, split.expected, split.shard_of, strict=True)
                    )
                    if s == index
                ],
            }
            for index in range(1, split.count + 1)
        ],
    }


def _needs_text(need: Needs) -> str:
    """``  ranks=2 devices=2`` for an item of several ranks or any device slot, else empty."""
    if need.ranks < 2 and not need.devices:
        return ""
    return f"  ranks={need.ranks} devices={need.devices}"


def print_split(split: ShardPlan) -> None:
    loads = split.loads()
    for index in range(1, split.count + 1):
        members = [
            (it, e, split.need_of(i))
            for i, (it, e, s) in enumerate(
                zip(split.items, split.expected, split.shard_of, strict=True)
            )
            if s == index
        ]
        devices = split.devices_of(index)
        slots = f", needs {devices} device slot(s)" if devices else ""
        print(
            f"shard {index}/{split.count}: {len(members)} case(s), {loads[index - 1]:.2f} s{slots}"
        )
        for it, e, need in members:
            how = f"  (estimated: {e.estimate})" if e.estimate else ""
            print(f"  {it.name}  {e.seconds:.2f} s{_needs_text(need)}{how}")
    estimated = sum(1 for e in split.expected if e.estimate is not None)
    longest = max(loads, default=0.0)
    ideal = split.ideal_s()
    ratio = f", {longest / ideal:.3f} x ideal" if ideal > 0 else ""
    print(
        f"{split.count} shard(s) by {split.by}: longest {longest:.2f} s, ideal {ideal:.2f} s"
        f"{ratio}; {estimated} of {len(split.items)} case duration(s) estimated; "
        f"plan {split.digest}" + (f", nonce {split.nonce}" if split.nonce else ", no nonce")
    )
