"""`harness compare --base-env --head-env` end to end: one revision in two real virtual
environments (``venv --system-site-packages`` over the test environment) that differ in one
pure-Python distribution, ``tinyav_knob``, which a small scenario reads (see ``twoenvs``).

The reference is blessed from a run in environment ``a`` (the CLI itself running there). The
comparisons run the CLI as a subprocess (real workers under each venv's interpreter, real
outputs), and verdicts, the environment difference and each side's report are asserted from
the files written.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from twoenvs import CASE_NAME, git, make_project, make_venv

from harness.model import Comparison
from harness.report.schema import validate_comparison

# three virtual environments and a blessed run (`lab`): built once, on one xdist worker
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("two-envs")]


def cli(
    python: str, *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [python, "-m", "harness.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        env=None if env is None else {**os.environ, **env},
    )


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Three venvs (knob 1.0; 2.0 with another gain and a slower render; 1.1 changing
    nothing), the scenario's repository, and its reference blessed from a run in ``a``."""
    root = tmp_path_factory.mktemp("two-envs")
    lab: dict[str, Any] = make_project(root)
    lab["a"] = make_venv(root / "a", version="1.0", gain=1.0)
    lab["b"] = make_venv(root / "b", version="2.0", gain=1.5, delay_s=0.3)
    lab["c"] = make_venv(root / "c", version="1.1", gain=1.0)
    lab["refs"].mkdir()
    py_a = str(lab["a"] / "bin" / "python")
    run = cli(
        py_a,
        "run",
        "cases",
        "--code-root",
        str(lab["repo"] / "scen"),
        "--references",
        str(lab["refs"]),
        "--runner",
        str(lab["runner"]),
        "--out",
        str(lab["runs"]),
        "--run-id",
        "bless-a",
        cwd=lab["work"],
    )
    assert (lab["runs"] / "bless-a" / "report.json").is_file(), run.stderr[-3000:]
    bless = cli(
        py_a,
        "refs",
        "bless",
        "--run",
        str(lab["runs"] / "bless-a"),
        "--case",
        "knob-render",
        "--reason",
        "knob 1.0 (environment a)",
        "--references",
        str(lab["refs"]),
        cwd=lab["work"],
    )
    assert bless.returncode == 0, bless.stderr[-3000:]
    return lab


def compare(
    lab: dict[str, Any], base: str, head: str, cid: str, *extra: str
) -> tuple[int, dict[str, Any], str]:
    proc = cli(
        sys.executable,
        "compare",
        "--base-env",
        base,
        "--head-env",
        head,
        "cases",
        "--repo",
        str(lab["repo"]),
        "--code-root",
        "scen",
        "--references",
        str(lab["refs"]),
        "--runner",
        str(lab["runner"]),
        "--reuse-workers",  # environments, not latency, are the subject
        "--noise-dir",
        str(lab["runs"] / "noise"),
        "--out",
        str(lab["runs"]),
        "--id",
        cid,
        *extra,
        cwd=lab["work"],
    )
    path = lab["runs"] / cid / "comparison.json"
    assert path.is_file(), proc.stderr[-4000:]
    doc = json.loads(path.read_text())
    validate_comparison(doc)
    assert Comparison.from_json(doc).to_json() == doc
    return proc.returncode, doc, proc.stderr


def side_report(lab: dict[str, Any], cid: str, side: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((lab["runs"] / cid / side / "report.json").read_text())
    return doc


def only_case(doc: dict[str, Any]) -> dict[str, Any]:
    (c,) = doc["cases"]
    assert f"{c['kind']}/{c['id']}[{c['platform']}]" == CASE_NAME
    return c


def test_a_release_that_changes_the_output_and_the_time_is_a_regression_naming_the_package(
    lab: dict[str, Any],
) -> None:
    code, doc, err = compare(lab, str(lab["a"]), str(lab["b"]), "a-vs-b")
    assert doc["env_diff"] == {
        "python": None,
        "added": {},
        "removed": {},
        "changed": {"tinyav-knob": {"base": "1.0", "head": "2.0"}},
        "reason": None,
    }
    # differing packages are the point here: same machine, nothing refused as not comparable
    assert doc["same_runner"] is True and doc["allowed_different_env"] is True
    c = only_case(doc)
    psnr = next(q for q in c["quality"] if q["metric"] == "psnr")
    assert psnr["verdict"] == "regression", psnr
    # base is the blessed output itself (infinite PSNR); head's differs, within the threshold
    assert psnr["base_vs_ref"] == "inf" and 30 < psnr["head_vs_ref"] < 60
    assert psnr["identical"] is False
    assert c["divergence"]["kind"] == "stage" and c["divergence"]["first"] == "render.image"
    render = next(s for s in c["latency"] if s["stage"] == "render")
    assert render["verdict"] == "regression" and render["confirmation"] == "regression"
    assert render["ratio"] > 10
    assert c["failures"]["verdict"] == "no_change"  # the absolute threshold still passes
    assert c["verdict"] == "regression" and code == 1, err[-2000:]
    for side, venv, version in (("base", lab["a"], "1.0"), ("head", lab["b"], "2.0")):
        rep = side_report(lab, "a-vs-b", side)
        python = str(venv / "bin" / "python")
        assert rep["env"]["python"]["executable"] == python
        assert rep["env"]["packages"]["tinyav-knob"] == version
        assert "numpy" in rep["env"]["packages"]  # the test env's packages, seen through the venv
        # the worker really imported that environment's knob
        measured = [a for a in rep["cases"][0]["attempts"] if not a["warmup"]]
        assert {a["notes"]["knob.version"] for a in measured} == {version}
        assert doc[side]["env"] == str(venv) and doc[side]["python"] == python
    summary = (lab["runs"] / "a-vs-b" / "summary.md").read_text()
    assert f"environment `{lab['b']}` vs `{lab['a']}` (working tree)" in summary
    assert "#### Environment difference" in summary and "| `tinyav-knob` | 1.0 | 2.0 |" in summary


def test_b_release_that_changes_nothing_is_no_change_for_the_checked_out_revision(
    lab: dict[str, Any],
) -> None:
    # an interpreter path works as well as a venv folder; --rev checks v1 out once for both
    code, doc, err = compare(
        lab, str(lab["a"] / "bin" / "python"), str(lab["c"]), "a-vs-c", "--rev", "v1"
    )
    assert doc["env_diff"]["changed"] == {"tinyav-knob": {"base": "1.0", "head": "1.1"}}
    c = only_case(doc)
    assert c["verdict"] in ("no_change", "inconclusive"), c
    assert c["quality_verdict"] == "no_change" and c["divergence"]["kind"] == "none"
    assert all(q["identical"] is True for q in c["quality"])
    assert code == 0, err[-2000:]
    sha = git(lab["repo"], "rev-parse", "v1")
    assert doc["base"]["rev"] == doc["head"]["rev"] == "v1"
    assert doc["base"]["sha"] == doc["head"]["sha"] == sha
    # one checkout: both sides imported the very same scenario file
    assert doc["base"]["code_files"] == doc["head"]["code_files"]
    base, head = side_report(lab, "a-vs-c", "base"), side_report(lab, "a-vs-c", "head")
    assert base["env"]["code_roots"] == head["env"]["code_roots"]
    assert base["env"]["rev"] == head["env"]["rev"] == sha
    assert base["env"]["packages"]["tinyav-knob"] == "1.0"
    assert head["env"]["packages"]["tinyav-knob"] == "1.1"


def test_c_two_saved_runs_from_two_runners_show_the_environment_beside_the_divergence(
    lab: dict[str, Any],
) -> None:
    """Two CI artifacts: a run in environment ``a`` (knob 1.0) and one in ``b`` (knob 2.0,
    whose noise gain changes the render stage's numbers), each recorded as a different GitHub
    runner would record it (runner name and image variables)."""
    runners = {
        "a": {"RUNNER_NAME": "ci-runner-a", "ImageOS": "ubuntu22", "ImageVersion": "20241201.1"},
        "b": {"RUNNER_NAME": "ci-runner-b", "ImageOS": "ubuntu24", "ImageVersion": "20241125.1"},
    }
    for venv, variables in runners.items():
        run = cli(
            str(lab[venv] / "bin" / "python"),
            "run",
            "cases",
            "--code-root",
            str(lab["repo"] / "scen"),
            "--references",
            str(lab["refs"]),
            "--runner",
            str(lab["runner"]),
            "--out",
            str(lab["runs"]),
            "--run-id",
            f"ci-{venv}",
            cwd=lab["work"],
            env=variables,
        )
        assert (lab["runs"] / f"ci-{venv}" / "report.json").is_file(), run.stderr[-3000:]
    environment = [
        "runner image ubuntu22 20241201.1 -> ubuntu24 20241125.1",
        "runner ci-runner-a -> ci-runner-b",
        "tinyav-knob 1.0 -> 2.0",
    ]
    expected = (
        "inputs identical (1 hash); first divergence at render.image; environments differ in "
        + ", ".join(environment)
    )

    def compare_saved(cid: str, *extra: str) -> tuple[int, dict[str, Any]]:
        proc = cli(
            sys.executable,
            "compare",
            str(lab["runs"] / "ci-a"),
            str(lab["runs"] / "ci-b"),
            "--references",
            str(lab["refs"]),
            "--out",
            str(lab["runs"]),
            "--id",
            cid,
            *extra,
            cwd=lab["work"],
        )
        path = lab["runs"] / cid / "comparison.json"
        assert path.is_file(), proc.stderr[-3000:]
        doc = json.loads(path.read_text())
        validate_comparison(doc)
        assert Comparison.from_json(doc).to_json() == doc
        return proc.returncode, doc

    # without the flag: refused (another runner), and still says what differs and where
    code, doc = compare_saved("saved-refused")
    c = only_case(doc)
    assert doc["env_differences"] == ["runner_name"] and c["verdict"] == "not_comparable"
    assert c["drift"]["text"] == expected and code == 3

    code, doc = compare_saved("saved-allowed", "--allow-different-env")
    c = only_case(doc)
    assert doc["allowed_different_env"] is True
    assert doc["env_diff"]["changed"] == {"tinyav-knob": {"base": "1.0", "head": "2.0"}}
    assert doc["env_diff"]["system"]["runner image"] == {
        "base": "ubuntu22 20241201.1",
        "head": "ubuntu24 20241125.1",
    }
    psnr = next(q for q in c["quality"] if q["metric"] == "psnr")
    assert psnr["verdict"] == "regression" and psnr["base_vs_ref"] == "inf", psnr
    assert c["verdict"] == "regression" and code == 1
    assert c["drift"] == {
        "inputs": "identical",
        "input_hashes": 1,  # latents.init: the seeded noise, the same on both runners
        "first": "render.image",
        "environment": environment,
        "text": expected,
    }
    folder = lab["runs"] / "saved-allowed"
    summary = (folder / "summary.md").read_text()
    assert "#### Environment drift" in summary
    assert "| runner image | ubuntu22 20241201.1 | ubuntu24 20241125.1 |" in summary
    assert (
        f"- `{CASE_NAME}` (regression): inputs identical (1 hash); first divergence at " in summary
    )
    html = (folder / "index.html").read_text()
    assert "environment drift</b>: " + expected.replace("->", "-&gt;") in html
