"""The per-platform fingerprint in the environment record: the same runner compares equal, a
runner whose driver, architecture or devices differ does not (compare's env_differences)."""

from __future__ import annotations

import copy
from typing import Any

from harness.compare.run import env_differences
from harness.worker.envinfo import collect_env, env_digest


def test_the_same_machine_twice_has_the_same_fingerprint_and_digest() -> None:
    a, b = collect_env(None), collect_env(None)
    assert a["platform_fingerprints"] == b["platform_fingerprints"]
    assert "cpu" in a["platform_fingerprints"]
    assert env_digest(a) == env_digest(b) and env_differences(a, b) == []


def _with_gpu(env: dict[str, Any], **change: Any) -> dict[str, Any]:
    out = copy.deepcopy(env)
    gpu = {
        "platform": "cuda",
        "arch": "sm_90",
        "driver": "12.4",
        "runtime": "12.4",
        "device_names": ["NVIDIA H100 80GB HBM3"],
        "device_count": 1,
        "devices": [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "memory_bytes": 85 * 10**9}],
        "reason": "NVIDIA H100 80GB HBM3",
    }
    out["platform_fingerprints"] = {**env["platform_fingerprints"], "cuda": {**gpu, **change}}
    return out


def test_another_driver_or_architecture_is_another_runner() -> None:
    env = collect_env(None)
    base = _with_gpu(env)
    assert env_differences(base, _with_gpu(env)) == []
    assert env_differences(base, _with_gpu(env, driver="12.8")) == ["platform_fingerprints"]
    assert env_differences(base, _with_gpu(env, arch="sm_100")) == ["platform_fingerprints"]
    # free-text reasons are not part of what is compared
    assert env_differences(base, _with_gpu(env, reason="other wording")) == []
