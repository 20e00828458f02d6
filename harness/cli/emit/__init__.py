"""``harness plan --shards N --emit ENGINE``: the engine's own job definition for a shard plan.

Each engine runs ``harness run ... --shard auto`` once per shard, with the same options the
plan was made with, so every machine computes the same split; the engines number their jobs
themselves (see :mod:`harness.cases.shard_env`). The harness schedules nothing: the engine
runs the shards, retries what its own policy retries, and ``harness merge`` joins the run
folders, listing any planned case that never reported.

Example::

    text = emit("github", split, shard_command(args), image=None, profile=profile)
"""

from __future__ import annotations

import argparse
import shlex
from dataclasses import dataclass

from harness.cases.shard import ShardPlan
from harness.errors import UsageError
from harness.platforms.profile import Profile

ENGINES = ("k8s-job", "buildkite", "github")

__all__ = ["ENGINES", "Emitted", "emit", "header", "shard_command"]


@dataclass(frozen=True)
class Emitted:
    """The engine's definition as text (YAML), and notes for the terminal."""

    text: str
    notes: tuple[str, ...] = ()


def shard_command(args: argparse.Namespace) -> list[str]:
    """``harness run`` with every option that fixes the split (cases, ``-k``, platforms, runner,
    durations, batch rule, nonce) as ``plan`` was given them, and ``--shard auto``."""
    argv = ["harness", "run", *(str(p) for p in args.paths)]
    if args.keyword:
        argv += ["-k", args.keyword]
    for name in args.platforms or ():
        argv += ["--platform", name]
    if args.runner:
        argv += ["--runner", args.runner]
    for path in args.durations or ():
        argv += ["--durations", str(path)]
    if args.shard_by != "case":
        argv += ["--shard-by", args.shard_by]
    if args.plan_nonce is not None:
        argv += ["--plan-nonce", args.plan_nonce]
    return [*argv, "--shard", "auto"]


def header(split: ShardPlan, engine: str, lines: list[str]) -> str:
    """The comment every emitted file starts with: what made it, and from which plan."""
    out = [
        f"# Emitted by `harness plan --shards {split.count} --emit {engine}` from plan "
        f"{split.digest}.",
        "# Every shard runs `harness run ... --shard auto` with the plan's options, so each",
        "# computes the same split; re-emit after changing cases, -k, platforms or durations.",
        *(f"# {line}" if line else "#" for line in lines),
    ]
    return "\n".join(out) + "\n"


def quoted(argv: list[str]) -> str:
    return shlex.join(argv)


def emit(
    engine: str,
    split: ShardPlan,
    command: list[str],
    *,
    image: str | None,
    profile: Profile,
) -> Emitted:
    """The definition for ``engine`` (one of :data:`ENGINES`)."""
    if engine == "k8s-job":
        if not image:
            raise UsageError(
                "--emit k8s-job: needs --image IMAGE, an image holding this checkout at its "
                "working directory with the harness installed"
            )
        from harness.cli.emit.k8s import job_yaml

        return job_yaml(split, command, image=image, profile=profile)
    if engine == "buildkite":
        if image:
            raise UsageError(
                "--image: only with --emit k8s-job or github (a Buildkite step runs on the "
                "agent's own image; add the docker plugin to the step for another)"
            )
        from harness.cli.emit.buildkite import pipeline_yaml

        return pipeline_yaml(split, command)
    if engine == "github":
        from harness.cli.emit.github import workflow_yaml

        return workflow_yaml(split, command, image=image, profile=profile)
    raise UsageError(f"--emit {engine}: expected one of {', '.join(ENGINES)}")


def dump_yaml(doc: object) -> str:
    """``doc`` as block YAML, keys in the order given (PyYAML: the ``engines`` extra)."""
    try:
        import yaml
    except ImportError:
        raise UsageError(
            "--emit: needs PyYAML; install the engines extra: pip install 'harness[engines]'"
        ) from None
    return str(yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, width=4096))
