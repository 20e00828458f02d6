"""Environment drift, the parts that start no worker: what the env records about the machine
(CPU flags, runner image), which differences a comparison names, and each case's line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.compare.drift import case_drift
from harness.compare.envdiff import env_diff, system_diff
from harness.model import Attempt, CaseComparison, Divergence, Drift, EnvDiff, FailureMatrix
from harness.worker.machineinfo import cpu_flags, runner_image


def test_cpu_flags_keep_what_selects_kernels_on_x86_and_arm(tmp_path: Path) -> None:
    x86 = tmp_path / "x86"
    x86.write_text(
        "processor\t: 0\nflags\t\t: fpu vme sse4_2 avx avx2 smep fma avx512f avx512_bf16 "
        "amx_tile hypervisor\nprocessor\t: 1\nflags\t\t: fpu\n"
    )
    kept = ["amx_tile", "avx", "avx2", "avx512_bf16", "avx512f", "fma", "sse4_2"]
    assert cpu_flags(str(x86)) == kept
    arm = tmp_path / "arm"
    arm.write_text("processor\t: 0\nFeatures\t: fp asimd evtstrm aes sve sve2 i8mm bf16 cpuid\n")
    assert cpu_flags(str(arm)) == ["asimd", "bf16", "i8mm", "sve", "sve2"]
    assert cpu_flags(str(tmp_path / "absent")) is None


def test_runner_image_from_github_or_the_harness_variables() -> None:
    gh = {"ImageOS": "ubuntu24", "ImageVersion": "20241125.1"}
    assert runner_image(gh) == {"name": "ubuntu24", "version": "20241125.1"}
    assert runner_image({"HARNESS_RUNNER_IMAGE": "rocm/pytorch:6.2"}) == {
        "name": "rocm/pytorch:6.2",
        "version": "",
    }
    assert runner_image({}) is None


def env(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "python": {"version": "3.10.12"},
        "platform": {"os": "Linux", "release": "6.8.0", "machine": "x86_64"},
        "ffmpeg": "6.1.1",
        "cpu_flags": ["avx", "avx2", "fma"],
        "runner_image": None,
        "runner_name": "gpu-07",
        "packages": {"scipy": "1.11.4", "numpy": "1.26.4"},
    }
    return {**base, **over}


def test_the_difference_names_python_the_machine_and_packages_in_that_order() -> None:
    head = env(
        python={"version": "3.12.3"},
        ffmpeg="7.0.2",
        cpu_flags=["avx", "avx2", "avx512f", "fma"],
        runner_image={"name": "ubuntu24", "version": "20241125.1"},
        packages={"scipy": "1.14.1", "numpy": "1.26.4", "cuda-python": "12.6.0"},
    )
    d = env_diff(env(), head)
    assert d.changes() == (
        "python 3.10.12 -> 3.12.3",
        "ffmpeg 6.1.1 -> 7.0.2",
        "runner image - -> ubuntu24 20241125.1",
        "cpu flags +avx512f",
        "scipy 1.11.4 -> 1.14.1",
        "cuda-python - -> 12.6.0",
    )
    assert EnvDiff.from_json(d.to_json()) == d
    # a report written before a field was recorded: unknown, not changed
    older = {k: v for k, v in env().items() if k not in ("cpu_flags", "runner_image")}
    assert set(system_diff(older, head)) == {"ffmpeg"}
    assert env_diff(env(), env()).empty


def _case(kind: str, first: str | None) -> CaseComparison:
    return CaseComparison(
        "c", "pipeline", "cpu", "regression", "no_change", "regression",
        FailureMatrix("no_change"), Divergence(kind, first),
    )  # fmt: skip


def test_each_case_line_puts_inputs_divergence_and_environment_side_by_side() -> None:
    diff = EnvDiff(python=("3.10.12", "3.12.3"), changed={"scipy": ("1.11.4", "1.14.1")})
    noise = {"hash": "n", "dtype": "float32", "shape": [4]}
    a = Attempt("c", "cpu", 0, "passed", 7, inputs={"prompt": "p", "ref.rgb": "r"})
    a = Attempt(**{**a.__dict__, "fingerprints": {"latents.init": noise, "denoise.step03": {}}})
    drift = case_drift(_case("stage", "denoise.step03"), a, a, diff)
    assert drift.line() == (
        "inputs identical (3 hashes); first divergence at denoise.step03; environments differ "
        "in python 3.10.12 -> 3.12.3, scipy 1.11.4 -> 1.14.1"
    )
    assert Drift.from_json(drift.to_json()) == drift
    assert (
        case_drift(_case("inputs", "ref.rgb"), a, a, diff)
        .line()
        .startswith("inputs differ at ref.rgb; environments differ in python")
    )
    bare = Attempt("c", "cpu", 0, "passed", 7)
    assert (
        case_drift(_case("none", None), bare, bare, diff)
        .line()
        .startswith("no input hashes recorded; nothing recorded differs;")
    )
    assert case_drift(_case("missing", None), None, a, diff).inputs == "missing"
    many = EnvDiff(changed={f"p{i}": ("1", "2") for i in range(8)})
    assert case_drift(_case("none", None), a, a, many).line().endswith("p5 1 -> 2, and 2 more")
