"""A GitHub Actions workflow for a shard plan: a matrix job over ``shard: [1..N]`` and a merge
job. GitHub has no shard variable, so each matrix job sets ``HARNESS_SHARD_INDEX`` from
``matrix.shard`` and ``HARNESS_SHARD_COUNT`` from ``strategy.job-total`` (the matrix has that
one dimension, so the two agree) for ``--shard auto``.

Safe to copy (``zizmor --offline`` finds nothing above informational): actions pinned by
commit with the version in a comment (:data:`PINS`), ``persist-credentials: false`` on every
checkout, ``permissions: {}`` for the workflow and ``contents: read`` per job, and no ``${{ }}``
expansion inside a ``run:`` script (values reach scripts through ``env:``)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from harness.cases.shard import ShardPlan
from harness.cli.emit import Emitted, dump_yaml, header, quoted
from harness.platforms.profile import Profile

__all__ = ["PINS", "pin_comments", "uses", "workflow", "workflow_yaml"]

# action -> (commit, the release tag it is): the same pins as runners/ci/github-actions.yml
# (tests/engines/test_emit.py checks both). Update both together, from the action's releases.
PINS: Mapping[str, tuple[str, str]] = {
    "actions/checkout": ("11d5960a326750d5838078e36cf38b85af677262", "v4.4.0"),
    "actions/setup-python": ("a26af69be951a213d495a4c3e4e4022e16d87065", "v5.6.0"),
    "actions/upload-artifact": ("ea165f8d65b6e75b540449e92b4886f43607fa02", "v4.6.2"),
    "actions/download-artifact": ("d3f86a106a0bac45b974a628896c90dbdf5c8093", "v4.3.0"),
}


def uses(action: str) -> str:
    return f"{action}@{PINS[action][0]}"


def pin_comments(text: str) -> str:
    """``uses: owner/name@<commit>`` lines get ``# <tag>`` after them (YAML has no comments
    to build, so they are added to the dumped text)."""
    by_commit = {commit: tag for commit, tag in PINS.values()}

    def add(m: re.Match[str]) -> str:
        tag = by_commit.get(m.group(2))
        return m.group(0) + (f"  # {tag}" if tag else "")

    return re.sub(r"^(\s*(?:- )?uses: [\w.-]+/[\w.-]+@)([0-9a-f]{40})$", add, text, flags=re.M)


def _setup(image: str | None) -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = [
        {"uses": uses("actions/checkout"), "with": {"persist-credentials": False}},
    ]
    if image is None:
        steps.append({"uses": uses("actions/setup-python"), "with": {"python-version": "3.11"}})
    steps.append({"name": "install", "run": "python -m pip install -e ."})
    return steps


def workflow(
    split: ShardPlan, command: list[str], *, image: str | None, profile: Profile
) -> dict[str, Any]:
    runs_on: str | list[str] = (
        "ubuntu-latest" if profile.platform == "cpu" else ["self-hosted", "linux", profile.name]
    )
    container = {"container": {"image": image}} if image else {}
    run = quoted([*command, "--out", "reports"]) + ' --run-id "shard-$HARNESS_SHARD_INDEX"'
    return {
        "name": "harness shards",
        "on": {"pull_request": {}, "push": {"branches": ["main"]}},
        "permissions": {},
        "concurrency": {
            "group": "${{ github.workflow }}-${{ github.ref }}",
            "cancel-in-progress": "${{ github.event_name == 'pull_request' }}",
        },
        "jobs": {
            "shard": {
                "name": "shard ${{ matrix.shard }}",
                "runs-on": runs_on,
                **container,
                "permissions": {"contents": "read"},
                "timeout-minutes": 60,
                "strategy": {
                    "fail-fast": False,
                    "matrix": {"shard": list(range(1, split.count + 1))},
                },
                "env": {
                    "HARNESS_SHARD_INDEX": "${{ matrix.shard }}",
                    "HARNESS_SHARD_COUNT": "${{ strategy.job-total }}",
                    "PYTHONUNBUFFERED": "1",
                },
                "steps": [
                    *_setup(image),
                    {"name": "run this shard", "run": run},
                    {
                        "name": "upload the run folder",
                        "if": "${{ !cancelled() }}",
                        "uses": uses("actions/upload-artifact"),
                        "with": {
                            "name": "run-shard-${{ matrix.shard }}",
                            "path": "reports/shard-${{ matrix.shard }}/",
                            "if-no-files-found": "error",
                        },
                    },
                ],
            },
            "merge": {
                "name": "merge the shards",
                "needs": "shard",
                "if": "${{ !cancelled() }}",
                "runs-on": "ubuntu-latest",
                **container,
                "permissions": {"contents": "read"},
                "steps": [
                    *_setup(image),
                    {
                        "uses": uses("actions/download-artifact"),
                        "with": {"pattern": "run-shard-*", "path": "shards"},
                    },
                    {"name": "merge the shards", "run": "harness merge shards --out merged"},
                    {
                        "name": "upload the merged report",
                        "if": "${{ !cancelled() }}",
                        "uses": uses("actions/upload-artifact"),
                        "with": {"name": "harness-report", "path": "merged/"},
                    },
                ],
            },
        },
    }


def workflow_yaml(
    split: ShardPlan, command: list[str], *, image: str | None, profile: Profile
) -> Emitted:
    text = header(
        split,
        "github",
        [
            "Copy to .github/workflows/; edit the install step to install your stack and the",
            "harness. Each shard uploads its run folder; merge joins them (a shard that never",
            "uploaded is listed as missing, exit 3).",
        ],
    )
    body = dump_yaml(workflow(split, command, image=image, profile=profile))
    notes = []
    if image and "@sha256:" not in image:
        notes.append(
            f"--image {image}: pin it by digest (IMAGE@sha256:...); a tag can be moved, and "
            "zizmor reports it (unpinned-images)"
        )
    return Emitted(text + pin_comments(body), tuple(notes))
