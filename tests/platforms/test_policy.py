"""Platform policy as data: resolution order and the rule each setting records, validation
errors that name the file and the key, and the latency guard that follows the policy."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from harness.checks.latency import budget_checks
from harness.errors import ProfileError
from harness.model import Attempt, Case, CheckSpec
from harness.platforms import policy
from harness.platforms.base import Identity
from harness.platforms.profile import Profile, load_profile, resolve_profile

REPO = Path(__file__).resolve().parents[2]
RUNNERS = REPO / "runners"
PACKAGED = str(policy.DEFAULTS_PATH)


def profile_file(tmp_path: Path, body: str, name: str = "r.toml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def overrun(seconds: float, stage: str = "DenoisingStage", n: int = 2) -> list[Attempt]:
    return [Attempt("c", "p", i, "passed", 0, repeat=i, stages={stage: seconds}) for i in range(n)]


# --- resolution -------------------------------------------------------------------------------


def test_packaged_defaults_fail_on_cuda_and_warn_on_hip_and_say_which_rule() -> None:
    cuda, hip = policy.resolve("cuda"), policy.resolve("hip")
    assert cuda.latency_on_fail == "fail"
    assert hip.latency_on_fail == "warn"
    assert hip.decisions["latency.on_fail"] == policy.Decision(
        "warn", "platform hip default", PACKAGED
    )
    # Set only in [default]: the harness default decides, from the same file.
    assert cuda.decisions["references.fallback"] == policy.Decision(
        ("any",), "harness default", PACKAGED
    )


def test_a_runner_profile_refines_its_own_platform_only(tmp_path: Path) -> None:
    path = profile_file(
        tmp_path,
        """
        name = "strict-mi300"
        platform = "hip"
        arch = "gfx942"
        [policy.latency]
        on_fail = "fail"
        abs_floor_s = 0.001
        [policy.quality]
        psnr = 30.0
        """,
    )
    prof = load_profile(path)
    hip = policy.resolve("hip", prof)
    assert hip.decisions["latency.on_fail"] == policy.Decision(
        "fail", "runner strict-mi300", str(path)
    )
    assert hip.decisions["latency.abs_floor_s"].rule == "runner strict-mi300"
    # Not named by the profile: the platform's default still decides.
    assert hip.decisions["latency.rel_tolerance"].rule == "platform hip default"
    assert hip.quality == {"ssim": 0.95, "psnr": 30.0}
    # A cuda run with this profile keeps cuda's policy: a runner class is one platform's.
    cuda = policy.resolve("cuda", prof)
    assert cuda.decisions["latency.on_fail"].rule == "platform cuda default"
    assert "quality.psnr" not in cuda.decisions


def test_retry_patterns_of_the_profile_add_to_the_platform_default(tmp_path: Path) -> None:
    path = profile_file(
        tmp_path,
        """
        platform = "cpu"
        [retry]
        patterns = ["flaky NFS"]
        """,
    )
    hip = policy.resolve("hip", load_profile(path))
    assert hip.retry_patterns == ("flaky NFS", "RCCL (error|timeout)")
    assert hip.decisions["retry.patterns"].rule == "runner r [retry] + platform hip default"


def test_readiness_timeout_retry_is_decided_by_policy_with_its_rule(tmp_path: Path) -> None:
    assert policy.resolve("cuda").readiness_retry == "once_if_logs_growing (harness default)"
    path = profile_file(
        tmp_path,
        """
        name = "no-second-chance"
        platform = "npu"
        [policy.retry]
        readiness_timeout = "never"
        """,
    )
    assert policy.resolve("npu", load_profile(path)).readiness_retry == (
        "never (runner no-second-chance)"
    )


def test_the_shipped_runner_profiles_resolve_as_their_hardware_demands() -> None:
    h100 = resolve_profile("h100", RUNNERS)
    mi300x = resolve_profile("mi300x", RUNNERS)
    mi355x = resolve_profile("mi355x", RUNNERS)
    ascend = resolve_profile("ascend-910b", RUNNERS)
    assert (h100.platform, h100.arch) == ("cuda", "sm_90")
    assert (mi300x.platform, mi300x.arch) == ("hip", "gfx942")
    assert (mi355x.platform, mi355x.arch) == ("hip", "gfx950")
    assert (ascend.platform, ascend.arch) == ("npu", "Ascend910B3")
    assert all(p.device_count == 1 for p in (h100, mi300x, mi355x, ascend))
    assert policy.resolve("cuda", h100).latency_on_fail == "fail"
    assert policy.resolve("hip", mi355x).decisions["latency.on_fail"].rule == "runner mi355x"
    npu = policy.resolve("npu", ascend)
    assert npu.attempt_scale == 3.0 and npu.decisions["timeouts.attempt_scale"].rule == (
        "runner ascend-910b"
    )
    cpu = resolve_profile(None, RUNNERS)
    assert policy.resolve("cpu", cpu).latency_limit(0.15) == pytest.approx(0.17)


def test_latency_limit_is_the_larger_of_relative_and_absolute_slack() -> None:
    cpu = policy.resolve("cpu")  # 10 %, 20 ms
    assert cpu.latency_limit(1.0) == pytest.approx(1.1)
    assert cpu.latency_limit(0.01) == pytest.approx(0.03)


def test_reference_and_threshold_chains() -> None:
    hip = policy.resolve("hip")
    assert hip.reference_chain("mi355x") == ("mi355x", "hip", "any")
    assert hip.reference_chain(None) == ("hip", "any")
    gfx950 = Identity("hip", "gfx950", "e4m3fn", ())
    assert policy.threshold_chain(("mi355x", "hip", "any"), gfx950) == (
        "mi355x",
        "hip:gfx950",
        "hip",
        "any",
    )
    assert policy.threshold_chain(("cpu", "any"), None) == ("cpu", "any")


def test_quality_thresholds_fill_in_where_the_case_names_none() -> None:
    ssim = CheckSpec("ssim", ">=", 0.98, name="ssim(video)")
    own = CheckSpec("ssim", ">=", 0.98, thresholds={"hip": 0.9}, name="ssim(ref)")
    psnr = CheckSpec("psnr", ">=", 35.0, name="psnr(video)")
    case = Case("c", "pipeline", "cases/c.toml", target="m:f", checks=(ssim, own, psnr))
    hip = policy.resolve("hip")
    applied, decided = policy.apply_quality(case, hip, hip.reference_chain(None))
    assert applied.checks[0].threshold_for(("hip", "any")) == 0.95
    assert applied.checks[1].threshold_for(("hip", "any")) == 0.9
    assert applied.checks[2].threshold_for(("hip", "any")) == 35.0
    assert decided == {
        "quality.ssim(video)": policy.Decision(0.95, "platform hip default", PACKAGED),
        "quality.ssim(ref)": policy.Decision(0.9, "case thresholds.hip", "cases/c.toml"),
    }
    # cuda has no quality policy: the case is unchanged.
    unchanged, none = policy.apply_quality(case, policy.resolve("cuda"), ("cuda", "any"))
    assert unchanged == case and none == {}


def test_describe_prints_every_setting_with_its_rule_and_file() -> None:
    lines = policy.describe(resolve_profile("mi355x", RUNNERS))
    assert lines[0].startswith("policy of platform hip on runner mi355x (arch gfx950)")
    on_fail = next(line for line in lines if "latency.on_fail" in line)
    assert "warn" in on_fail and "runner mi355x" in on_fail and "mi355x.toml" in on_fail
    ssim = next(line for line in lines if "quality.ssim" in line)
    assert "0.95" in ssim and "platform hip default" in ssim
    assert len(lines) == 1 + len(
        policy.resolve("hip", resolve_profile("mi355x", RUNNERS)).decisions
    )


# --- validation -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            '[policy.latency]\non_fail = "raise"',
            "key 'policy.latency.on_fail' = 'raise': expected one of",
        ),
        ("[policy.latency]\nrel_tolerance = -0.1", "key 'policy.latency.rel_tolerance' = -0.1"),
        ("[policy.latency]\nabs_floor_s = true", "key 'policy.latency.abs_floor_s' = True"),
        ("[policy.latency]\nslack = 1", "unknown key 'policy.latency.slack'"),
        ("[policy.speed]\nx = 1", "unknown key 'policy.speed'"),
        ("[policy.quality]\nsharpness = 1.0", "unknown key 'policy.quality.sharpness'"),
        ('[policy.quality]\nssim = "high"', "key 'policy.quality.ssim' = 'high'"),
        ('[policy.references]\nfallback = "any"', "key 'policy.references.fallback' = 'any'"),
        ('[policy.references]\nfallback = ["../up"]', "key 'policy.references.fallback'"),
        ("[policy.timeouts]\nattempt_scale = 0", "key 'policy.timeouts.attempt_scale' = 0"),
        ('[policy.retry]\npatterns = ["(unclosed"]', "key 'policy.retry.patterns' = '(unclosed'"),
        (
            '[policy.retry]\nreadiness_timeout = "always"',
            "key 'policy.retry.readiness_timeout' = 'always': expected one of \"never\"",
        ),
        ('policy = "strict"', "key 'policy' = 'strict': expected a table"),
        ('arch = "gfx 942"', "key 'arch' = 'gfx 942'"),
        ("arch = 942", "key 'arch' = 942"),
    ],
)
def test_a_bad_profile_key_names_the_file_and_the_key(
    tmp_path: Path, body: str, expected: str
) -> None:
    path = profile_file(tmp_path, 'platform = "hip"\n' + body + "\n")
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    assert str(info.value).startswith(f"{path}: "), info.value
    assert expected in str(info.value), info.value


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("[tpu.latency]\non_fail = 'warn'", "unknown key 'tpu': expected 'default' or a platform"),
        ("[default.latency]\non_fail = 'warn'", "[default] must set"),
        ("[hip.latency]\non_fail = 'maybe'", "key 'hip.latency.on_fail' = 'maybe'"),
        ("[hip]\nlatency = 1", "key 'hip.latency' = 1: expected a table"),
    ],
)
def test_a_bad_policy_defaults_file_names_the_file_and_the_key(
    tmp_path: Path, body: str, expected: str
) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(body + "\n")
    with pytest.raises(ProfileError) as info:
        policy.resolve("hip", defaults=path)
    assert str(info.value).startswith(f"{path}: "), info.value
    assert expected in str(info.value), info.value


def test_every_shipped_profile_and_the_packaged_defaults_load() -> None:
    for path in sorted(RUNNERS.glob("*.toml")):
        prof = load_profile(path)
        assert policy.describe(prof), path
    assert set(policy.load_defaults(policy.DEFAULTS_PATH)) >= {"default", "cpu", "cuda", "hip"}


# --- the latency guard follows the policy ------------------------------------------------------


def test_the_same_overrun_fails_on_cuda_warns_on_hip_and_is_skipped_where_policy_says(
    tmp_path: Path,
) -> None:
    attempts = overrun(0.5)
    [cuda] = budget_checks("c", {"DenoisingStage": 0.2}, attempts, policy.resolve("cuda"))
    [hip] = budget_checks("c", {"DenoisingStage": 0.2}, attempts, policy.resolve("hip"))
    assert cuda.passed is False and cuda.blocking and cuda.policy == "fail"
    assert hip.passed is False and not hip.blocking and hip.policy == "warn"
    assert hip.settings["on_fail_rule"] == "platform hip default"
    assert hip.settings["on_fail_source"] == PACKAGED
    assert "latency.on_fail = warn (platform hip default) warns" in (hip.reason or "")
    assert hip.threshold == pytest.approx(0.22)  # budget + 10 % (hip), above the 5 ms floor
    path = profile_file(tmp_path, 'platform = "hip"\n[policy.latency]\non_fail = "skip"\n')
    [skip] = budget_checks(
        "c", {"DenoisingStage": 0.2}, attempts, policy.resolve("hip", load_profile(path))
    )
    assert skip.passed is None and not skip.unjudged and not skip.blocking
    assert "not judged: latency.on_fail = skip (runner r" in (skip.reason or "")


def test_a_tiny_stage_within_the_absolute_floor_passes_on_cpu() -> None:
    # 25 ms against a 10 ms budget: 2.5x, but within the cpu floor (10 ms + 20 ms).
    [check] = budget_checks("c", {"Tiny": 0.01}, overrun(0.025, "Tiny"), policy.resolve("cpu"))
    assert check.passed is True
    [strict] = budget_checks("c", {"Tiny": 0.01}, overrun(0.025, "Tiny"), None)
    assert strict.passed is False  # without a policy: exactly the budget, as before


def test_profile_defaults_are_those_of_a_plain_profile() -> None:
    assert Profile().arch is None and Profile().policy == {}
