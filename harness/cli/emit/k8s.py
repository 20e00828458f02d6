"""A Kubernetes Indexed Job for a shard plan, built with the official client's models and
serialized by it (``ApiClient().sanitize_for_serialization``), so what is written is what the
client would send to the API server.

One pod per shard (``completionMode: Indexed``, ``completions`` = ``parallelism`` = N); the
pod reads its shard from ``JOB_COMPLETION_INDEX`` and ``HARNESS_SHARD_COUNT`` (``--shard
auto``) and the plan's nonce from the Job's uid, so two runs of the Job never merge. Each
index is retried once (``backoffLimitPerIndex: 1``) for infrastructure only: a pod that
exits with a finding (1, 7), a usage error (2) or nothing to run (5) fails its index at once
(``podFailurePolicy``), a pod evicted or preempted is retried without counting. Devices are
requested by platform (:data:`DEVICE_RESOURCES`) with the count the widest shard needs (a
device slot per rank), at least what the runner profile promises. Run folders land on the
``harness-runs`` PersistentVolumeClaim at ``/runs/shard-<index>``; a retried index moves its
earlier folder to ``/runs/retried/`` first, so ``harness merge /runs`` sees one per shard.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.cases.shard import ShardPlan
from harness.cli.emit import Emitted, dump_yaml, header, quoted
from harness.errors import UsageError
from harness.platforms.profile import Profile

__all__ = ["DEVICE_RESOURCES", "RUNS_CLAIM", "RUNS_MOUNT", "device_requests", "job", "job_yaml"]

# The extended resource each vendor's device plugin advertises: NVIDIA's and AMD's GPU device
# plugins, Huawei's Ascend Device Plugin (MindCluster; whole Ascend 910 NPUs), Intel's GPU
# plugin. Another card (Ascend 310P, a MIG slice) is one edit of the emitted file.
DEVICE_RESOURCES: Mapping[str, str] = {
    "cuda": "nvidia.com/gpu",
    "hip": "amd.com/gpu",
    "npu": "huawei.com/Ascend910",
    "xpu": "gpu.intel.com/i915",
}
RUNS_CLAIM = "harness-runs"
RUNS_MOUNT = "/runs"
# Exit codes that say the shard ran and found something (or was misused): a retry of the same
# code cannot change them (harness/model/exits.py). 3 (infrastructure, incomplete) is retried.
NOT_RETRIED = [1, 2, 5, 7]


def device_requests(split: ShardPlan, profile: Profile) -> tuple[dict[str, int], list[str]]:
    """Per device resource, the count one pod needs: the widest shard's device slots on that
    platform, and on the profile's platform at least its ``device_count`` (else the run would
    refuse a profile that promises devices it does not see). Also a note per resource."""
    wants: dict[str, int] = {}
    for i, item in enumerate(split.items):
        slots = split.need_of(i).devices
        if slots and item.platform in DEVICE_RESOURCES:
            wants[item.platform] = max(wants.get(item.platform, 0), slots)
    if profile.device_count and profile.platform in DEVICE_RESOURCES:
        wants.setdefault(profile.platform, 0)
    requests: dict[str, int] = {}
    notes = []
    for platform, need in sorted(wants.items()):
        resource = DEVICE_RESOURCES[platform]
        if platform == profile.platform and profile.device_count > need:
            requests[resource] = profile.device_count
            notes.append(
                f"{resource}: {profile.device_count} per pod, as runner profile {profile.name} "
                f"promises (device_count; the widest shard needs {need})"
            )
        else:
            requests[resource] = need
            notes.append(f"{resource}: {need} per pod (the widest shard, a slot per rank)")
    return requests, notes


def _script(command: list[str]) -> str:
    """The pod's shell script: set an earlier attempt's folder aside, then run the shard."""
    run = quoted([*command, "--out", RUNS_MOUNT]) + ' --run-id "shard-$JOB_COMPLETION_INDEX"'
    return (
        f'd={RUNS_MOUNT}/shard-"$JOB_COMPLETION_INDEX"; '
        f'if [ -e "$d" ]; then mkdir -p {RUNS_MOUNT}/retried && '
        f'mv "$d" {RUNS_MOUNT}/retried/"shard-$JOB_COMPLETION_INDEX-$(date +%s)"; fi; '
        f"exec {run}"
    )


def job(split: ShardPlan, command: list[str], *, image: str, profile: Profile) -> Any:
    """The ``V1Job`` for ``split``: models of the ``kubernetes`` client (the engines extra)."""
    try:
        from kubernetes import client as k8s
    except ImportError:
        raise UsageError(
            "--emit k8s-job: needs the kubernetes client; install the engines extra: "
            "pip install 'harness[engines]'"
        ) from None
    requests, _ = device_requests(split, profile)
    name = "harness-" + split.digest.split(":")[-1][:10]
    labels = {"app.kubernetes.io/name": "harness", "harness/plan": name.removeprefix("harness-")}
    env = [
        k8s.V1EnvVar(name="HARNESS_SHARD_COUNT", value=str(split.count)),
        k8s.V1EnvVar(
            name="HARNESS_PLAN_NONCE",
            value_from=k8s.V1EnvVarSource(
                field_ref=k8s.V1ObjectFieldSelector(
                    field_path="metadata.labels['batch.kubernetes.io/controller-uid']"
                )
            ),
        ),
        k8s.V1EnvVar(name="PYTHONUNBUFFERED", value="1"),
    ]
    container = k8s.V1Container(
        name="shard",
        image=image,
        command=["sh", "-c", _script(command)],
        env=env,
        resources=k8s.V1ResourceRequirements(
            limits={k: str(v) for k, v in requests.items()} or None
        ),
        volume_mounts=[k8s.V1VolumeMount(name="runs", mount_path=RUNS_MOUNT)],
    )
    pod = k8s.V1PodSpec(
        restart_policy="Never",
        containers=[container],
        volumes=[
            k8s.V1Volume(
                name="runs",
                persistent_volume_claim=k8s.V1PersistentVolumeClaimVolumeSource(
                    claim_name=RUNS_CLAIM
                ),
            )
        ],
    )
    policy = k8s.V1PodFailurePolicy(
        rules=[
            k8s.V1PodFailurePolicyRule(
                action="FailIndex",
                on_exit_codes=k8s.V1PodFailurePolicyOnExitCodesRequirement(
                    container_name="shard", operator="In", values=NOT_RETRIED
                ),
            ),
            k8s.V1PodFailurePolicyRule(
                action="Ignore",
                on_pod_conditions=[
                    k8s.V1PodFailurePolicyOnPodConditionsPattern(
                        type="DisruptionTarget", status="True"
                    )
                ],
            ),
        ]
    )
    return k8s.V1Job(
        api_version="batch/v1",
        kind="Job",
        metadata=k8s.V1ObjectMeta(name=name, labels=labels),
        spec=k8s.V1JobSpec(
            completion_mode="Indexed",
            completions=split.count,
            parallelism=split.count,
            backoff_limit_per_index=1,
            pod_failure_policy=policy,
            template=k8s.V1PodTemplateSpec(metadata=k8s.V1ObjectMeta(labels=labels), spec=pod),
        ),
    )


def job_yaml(split: ShardPlan, command: list[str], *, image: str, profile: Profile) -> Emitted:
    from kubernetes.client import ApiClient

    doc = ApiClient().sanitize_for_serialization(job(split, command, image=image, profile=profile))
    _, notes = device_requests(split, profile)
    text = header(
        split,
        "k8s-job",
        [
            "kubectl apply -f job.yaml; the pods write their run folders to the PersistentVolume",
            f"Claim {RUNS_CLAIM} (create it first, ReadWriteMany) at {RUNS_MOUNT}/shard-<index>;",
            "when the Job finishes, from a pod that mounts it: "
            f"harness merge {RUNS_MOUNT} --out {RUNS_MOUNT}/merged",
        ],
    )
    return Emitted(text + dump_yaml(doc), tuple(notes))
