"""A Buildkite pipeline for a shard plan: one step with ``parallelism: N`` (each job reads its
shard from ``BUILDKITE_PARALLEL_JOB``, 0-based, with ``--shard auto``), a ``wait`` that lets
failed shards through, and a merge step that downloads every shard's run folder.

Retries: a job whose agent was lost (exit -1, or stopped) is retried once; a job that ran and
exited with the harness's code is not (a finding does not change on a re-run, and an
infrastructure exit 3 already left its run folder for the merge to show)."""

from __future__ import annotations

from typing import Any

from harness.cases.shard import ShardPlan
from harness.cli.emit import Emitted, dump_yaml, header, quoted

__all__ = ["pipeline", "pipeline_yaml"]


def pipeline(split: ShardPlan, command: list[str]) -> dict[str, Any]:
    # $$: Buildkite interpolates $VAR when the pipeline is uploaded; the job's shell expands it.
    run = quoted([*command, "--out", "reports"]) + ' --run-id "shard-$$BUILDKITE_PARALLEL_JOB"'
    return {
        "steps": [
            {
                "label": f":test_tube: harness shard %n of {split.count}",
                "key": "harness-shards",
                "command": run,
                "parallelism": split.count,
                "artifact_paths": ["reports/shard-*/**/*"],
                "retry": {
                    "automatic": [
                        {"exit_status": -1, "limit": 1},
                        {"signal_reason": "agent_stop", "limit": 1},
                    ]
                },
            },
            {"wait": None, "continue_on_failure": True},
            {
                "label": ":card_index_dividers: harness merge",
                "key": "harness-merge",
                "command": 'buildkite-agent artifact download "reports/shard-*/**/*" . && '
                "harness merge reports --out merged",
                "artifact_paths": ["merged/**/*"],
            },
        ]
    }


def pipeline_yaml(split: ShardPlan, command: list[str]) -> Emitted:
    text = header(
        split,
        "buildkite",
        [
            "buildkite-agent pipeline upload pipeline.yml; each job uploads reports/shard-<job>/,",
            "the merge step joins them (a shard that never uploaded is listed as missing).",
        ],
    )
    return Emitted(text + dump_yaml(pipeline(split, command)))
