"""``harness plan --shards N --emit k8s-job|buildkite|github``: each output is validated by the
engine's own client or schema (the kubernetes client's models; the Buildkite and GitHub
workflow JSON schemas that check-jsonschema ships, offline), asks for the devices the plan's
ranks need, and every `harness` command in it is accepted by the real CLI parser."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

import harness
from harness.cli import build_parser, main
from harness.cli.emit import shard_command
from harness.cli.tree import check_command_line, shell_commands

REPO = Path(harness.__file__).resolve().parent.parent
kubernetes = pytest.importorskip("kubernetes", reason="the engines extra (kubernetes client)")


def emit(
    capsys: pytest.CaptureFixture[str], engine: str, *argv: str, shards: int = 3
) -> tuple[str, str]:
    code = main(["plan", *argv, "--shards", str(shards), "--emit", engine])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out, err


@pytest.fixture(autouse=True)
def _in_repo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)  # the repository's cases/ and runners/, read only


def _job(text: str) -> Any:
    """The emitted Job read back through the client's models, whose setters validate."""
    from kubernetes.client import ApiClient

    body = json.dumps(yaml.safe_load(text))
    return ApiClient().deserialize(body, "V1Job", "application/json")


def test_the_k8s_job_round_trips_through_the_client_s_models(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from kubernetes.client import ApiClient

    text, _ = emit(capsys, "k8s-job", "cases/loader", "--image", "registry.example/stack:ci")
    doc = yaml.safe_load(text)
    job = _job(text)
    assert ApiClient().sanitize_for_serialization(job) == doc  # nothing lost or added
    spec = job.spec
    assert (spec.completion_mode, spec.completions, spec.parallelism) == ("Indexed", 3, 3)
    assert spec.backoff_limit_per_index == 1
    fail_index, ignore = spec.pod_failure_policy.rules
    assert fail_index.action == "FailIndex" and fail_index.on_exit_codes.values == [1, 2, 5, 7]
    assert ignore.on_pod_conditions[0].type == "DisruptionTarget"
    pod = spec.template.spec
    (container,) = pod.containers
    env = {e.name: e for e in container.env}
    assert env["HARNESS_SHARD_COUNT"].value == "3"
    assert "controller-uid" in env["HARNESS_PLAN_NONCE"].value_from.field_ref.field_path
    assert container.volume_mounts[0].mount_path == "/runs"
    assert pod.volumes[0].persistent_volume_claim.claim_name == "harness-runs"
    assert container.resources.limits is None  # a CPU plan asks for no device

    # the client validates: a Job whose pod has no container is refused
    del doc["spec"]["template"]["spec"]["containers"]
    with pytest.raises(ValueError, match="containers"):
        _job(yaml.safe_dump(doc))


@pytest.mark.parametrize(
    ("runner", "paths", "resource", "count"),
    [
        ("h100", "cases/multirank", "nvidia.com/gpu", "2"),  # 2 ranks: a device each
        ("mi300x", "cases/multirank", "amd.com/gpu", "2"),
        ("ascend-910b", "cases/multirank", "huawei.com/Ascend910", "2"),
        ("h100", "cases/loader", "nvidia.com/gpu", "1"),
    ],
)
def test_the_job_requests_the_devices_the_plan_s_ranks_need(
    capsys: pytest.CaptureFixture[str], runner: str, paths: str, resource: str, count: str
) -> None:
    text, err = emit(capsys, "k8s-job", paths, "--runner", runner, "--image", "img:1")
    limits = _job(text).spec.template.spec.containers[0].resources.limits
    assert limits == {resource: count}
    assert f"note: {resource}: {count} per pod" in err


def test_a_profile_promising_more_devices_gets_them(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    profile = tmp_path / "eight.toml"
    profile.write_text('name = "eight"\nplatform = "cuda"\ndevice_count = 8\n')
    text, err = emit(
        capsys, "k8s-job", "cases/multirank", "--runner", str(profile), "--image", "img:1"
    )
    assert _job(text).spec.template.spec.containers[0].resources.limits == {"nvidia.com/gpu": "8"}
    assert "as runner profile eight promises (device_count; the widest shard needs 2)" in err


def _schema_check(schema: str, text: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / f"{schema.replace('.', '-')}.yml"
    path.write_text(text)
    return subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", schema, str(path)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_buildkite_and_github_outputs_pass_their_engine_s_schema(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    pytest.importorskip("check_jsonschema", reason="dev extra: check-jsonschema")
    buildkite, _ = emit(capsys, "buildkite", "cases/loader", "-k", "int8", shards=4)
    github, _ = emit(capsys, "github", "cases/loader", "-k", "int8", shards=4)
    for schema, text in (("vendor.buildkite", buildkite), ("vendor.github-workflows", github)):
        proc = _schema_check(schema, text, tmp_path)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    step = yaml.safe_load(buildkite)["steps"][0]
    assert step["parallelism"] == 4 and "BUILDKITE_PARALLEL_JOB" in step["command"]
    shard = yaml.safe_load(github)["jobs"]["shard"]
    assert shard["strategy"]["matrix"]["shard"] == [1, 2, 3, 4]
    assert shard["env"]["HARNESS_SHARD_COUNT"] == "${{ strategy.job-total }}"
    # and the schema check can fail: a step whose parallelism is not a number
    wrong = buildkite.replace("parallelism: 4", "parallelism: [4]")
    broken = _schema_check("vendor.buildkite", wrong, tmp_path)
    assert broken.returncode == 1


def _harness_commands(engine: str, text: str) -> list[list[str]]:
    """Every `harness ...` argv in an emitted file's scripts."""
    doc = yaml.safe_load(text)
    if engine == "k8s-job":
        scripts = [c["command"][2] for c in doc["spec"]["template"]["spec"]["containers"]]
    elif engine == "buildkite":
        scripts = [s["command"] for s in doc["steps"] if "command" in s]
    else:
        scripts = [s["run"] for j in doc["jobs"].values() for s in j["steps"] if "run" in s]
    found = []
    for script in scripts:
        for argv in shell_commands(script.replace("$$", "$")):
            words = argv[1:] if argv[0] == "exec" else argv
            if words[0] == "harness":
                found.append(words[1:])
    return found


@pytest.mark.parametrize("engine", ["k8s-job", "buildkite", "github"])
def test_every_emitted_harness_command_parses(
    capsys: pytest.CaptureFixture[str], engine: str
) -> None:
    extra = ["--image", "img:1"] if engine == "k8s-job" else []
    argv = ["cases/loader", "cases/quant", "-k", "not fp8", "--platform", "cpu"]
    argv += ["--shard-by", "file", "--plan-nonce", "n1"]
    text, _ = emit(capsys, engine, *argv, *extra)
    commands = _harness_commands(engine, text)
    assert {c[0] for c in commands} == ({"run"} if engine == "k8s-job" else {"run", "merge"})
    parser = build_parser()
    for command in commands:
        args = check_command_line(parser, command)
        if command[0] == "run":
            # the shard runs exactly the plan that was emitted
            assert args.shard == "auto" and args.keyword == "not fp8"
            assert [str(p) for p in args.paths] == ["cases/loader", "cases/quant"]
            assert (args.shard_by, args.plan_nonce) == ("file", "n1"), shlex.join(command)


def test_the_shard_command_carries_every_option_that_fixes_the_split() -> None:
    args = build_parser().parse_args(
        ["plan", "cases", "--runner", "h100", "--durations", "a/report.json", "--shards", "2"]
    )
    command = shard_command(args)
    assert command[:2] == ["harness", "run"] and command[-2:] == ["--shard", "auto"]
    assert check_command_line(build_parser(), command[1:]).durations == [Path("a/report.json")]
    assert check_command_line(build_parser(), command[1:]).runner == "h100"


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["plan", "--emit", "github"], "--emit github: only with --shards N"),
        (["plan", "--shards", "2", "--emit", "k8s-job"], "--emit k8s-job: needs --image IMAGE"),
        (["plan", "--shards", "2", "--image", "x"], "--image: only with --emit"),
        (["plan", "--shards", "2", "--emit", "buildkite", "--image", "x"], "--image: only with"),
        (["plan", "--shards", "2", "--emit", "github", "--json"], "pick one"),
    ],
)
def test_emit_usage_errors(capsys: pytest.CaptureFixture[str], argv: list[str], says: str) -> None:
    assert main([*argv, "cases/loader"]) == 2
    out, err = capsys.readouterr()
    assert says in err and out == ""
