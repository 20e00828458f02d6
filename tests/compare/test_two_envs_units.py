"""The parts of `harness compare --base-env --head-env` that start no worker: finding and
probing each interpreter (usage errors naming the path), the flag combinations, the pure
environment difference, package versions in the env record, its rendering, and saved runs."""

from __future__ import annotations

import importlib.metadata
import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.cli import main
from harness.compare.envdiff import env_diff, env_differences, machine_differences
from harness.compare.envs import find_interpreter, probe_interpreter
from harness.compare.run import CompareRequest
from harness.compare.saved import compare_reports
from harness.errors import UsageError
from harness.model import Attempt, CaseResult, Comparison, EnvDiff, RunReport, SideInfo
from harness.report.comparison_md import comparison_markdown
from harness.report.schema import validate_comparison
from harness.worker.distributions import _metadata_header, packages
from harness.worker.envinfo import collect_env


@pytest.fixture
def cli(
    repo: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[..., tuple[int, str]]:
    """``harness compare ARGS`` in this process, in a fresh git repository: (exit, stderr)."""
    monkeypatch.chdir(repo)

    def run(*args: str) -> tuple[int, str]:
        capsys.readouterr()
        code = main(["compare", *args, "--out", str(repo / "out")])
        return code, capsys.readouterr().err

    return run


def script(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    return tmp_path


# --- the interpreter behind each PATH ---------------------------------------------------------


def test_a_venv_folder_means_its_bin_python_with_the_venv_symlink_kept(tmp_path: Path) -> None:
    venv = tmp_path / "v"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
    )
    found = find_interpreter(str(venv), "--base-env")
    assert found == str(venv / "bin" / "python")  # not resolved: that would leave the venv
    assert find_interpreter(found, "--base-env") == found


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: d / "nowhere", "no such file or folder"),
        (lambda d: (d / "empty").mkdir() or d / "empty", "a folder without bin/python"),
        (
            lambda d: (d / "plain.txt").write_text("x") and d / "plain.txt",
            "does not run",
        ),
        (
            lambda d: script(d / "sh-python", "#!/bin/sh\necho not python >&2\nexit 3\n"),
            "does not run as a Python 3 interpreter (exit status 3: not python)",
        ),
        (
            # a real Python that ignores PYTHONPATH and site-packages: no harness to import
            lambda d: script(d / "isolated", f'#!/bin/sh\nexec {sys.executable} -I -S "$@"\n'),
            "cannot import the harness (ModuleNotFoundError",
        ),
    ],
    ids=["missing", "folder-without-python", "not-executable", "not-python", "no-harness"],
)
def test_each_unusable_path_is_a_usage_error_that_names_it(
    repo: Path, cli: Callable[..., tuple[int, str]], make: Any, message: str
) -> None:
    bad = make(repo)
    with pytest.raises(UsageError, match="--head-env") as info:
        probe_interpreter(str(bad), "--head-env")
    assert message in str(info.value) and str(bad) in str(info.value)
    # the CLI: exit 2, before any worker starts (the base side is this interpreter, fine)
    code, err = cli("--base-env", sys.executable, "--head-env", str(bad))
    assert code == 2, err
    assert message in err and f"--head-env {bad}" in err


def test_a_working_interpreter_reports_its_version_and_the_harness_it_imports() -> None:
    it = probe_interpreter(sys.executable, "--base-env")
    assert it.version == ".".join(map(str, sys.version_info[:3]))
    import harness

    assert it.harness == harness.__file__


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--base-env", "x"), "--base-env and --head-env go together"),
        (("--head-env", "x"), "--base-env and --head-env go together"),
        (("--base-env", "x", "--head-env", "y", "--base", "HEAD"), "drop --base/--head/--aa"),
        (("--base-env", "x", "--head-env", "y", "--aa", "HEAD"), "drop --base/--head/--aa"),
        (("--base", "HEAD", "--rev", "HEAD"), "--rev REV goes with --base-env/--head-env"),
    ],
)
def test_flag_combinations(
    cli: Callable[..., tuple[int, str]], args: tuple[str, ...], message: str
) -> None:
    code, err = cli(*args)
    assert code == 2, err
    assert message in err


def test_one_environment_twice_is_refused_pointing_at_aa(
    cli: Callable[..., tuple[int, str]],
) -> None:
    code, err = cli("--base-env", sys.executable, "--head-env", sys.prefix)
    assert code == 2, err
    assert "are one environment" in err and "--aa REV" in err


def test_help_shows_the_two_environment_example(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["compare", "--help"])
    out = capsys.readouterr().out
    assert done.value.code == 0
    assert "--base-env .venv-torch212 --head-env .venv-torch213" in out
    assert "env_diff" in out


# --- package versions and their difference ----------------------------------------------------


@pytest.fixture(scope="module")
def here() -> dict[str, Any]:
    """This machine's real environment record."""
    return collect_env(None)


def test_the_env_record_lists_every_distribution_by_canonical_name_sorted(
    here: dict[str, Any],
) -> None:
    found = packages()
    assert list(found) == sorted(found)
    assert found["numpy"] == importlib.metadata.version("numpy")
    assert found["scikit-image"] == importlib.metadata.version("scikit-image")
    assert all(n == n.lower() and "_" not in n and "." not in n for n in found)
    assert here["packages"] == found
    # the same as reading each distribution's whole metadata (only its header is read)
    whole: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        if dist.metadata and dist.metadata["Name"]:
            name = re.sub(r"[-_.]+", "-", dist.metadata["Name"]).lower()
            whole.setdefault(name, dist.version)
    assert found == dict(sorted(whole.items()))


def test_a_distribution_s_name_and_version_come_from_its_metadata_header(tmp_path: Path) -> None:
    info = tmp_path / "tinyav_knob-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_bytes(
        b"Metadata-Version: 2.1\r\nName: Tinyav_Knob\r\nVersion: 1.0\r\n"
        b"Summary: a summary\r\n  folded onto a second line\r\n\r\n"
        b"Name: not-this\r\nVersion: 9\r\n"  # the long description, not the header
    )
    dist = importlib.metadata.PathDistribution(info)
    header = _metadata_header(dist)
    assert (header["Name"], header["Version"]) == ("Tinyav_Knob", "1.0")
    assert (header["Name"], header["Version"]) == (dist.metadata["Name"], dist.version)


def env(python: str = "3.11.7", **pkgs: str) -> dict[str, Any]:
    return {"python": {"version": python}, "packages": dict(sorted(pkgs.items()))}


def test_env_diff_names_added_removed_and_changed_packages_and_python() -> None:
    d = env_diff(
        env("3.11.7", torch="2.12.0", numpy="2.4.6", old="1"),
        env("3.12.1", torch="2.13.0", numpy="2.4.6", new="3"),
    )
    assert d.python == ("3.11.7", "3.12.1")
    assert dict(d.changed) == {"torch": ("2.12.0", "2.13.0")}
    assert dict(d.added) == {"new": "3"} and dict(d.removed) == {"old": "1"}
    assert d.reason is None and not d.empty
    same = env_diff(env(torch="2.13.0"), env(torch="2.13.0"))
    assert same.empty and same == EnvDiff()
    assert EnvDiff.from_json(d.to_json()) == d


def test_env_diff_without_a_package_list_says_so() -> None:
    d = env_diff({"python": {"version": "3.11.7"}}, env(torch="2.13.0"))
    assert d.empty and d.reason is not None and d.reason.startswith("base recorded no package")


def test_same_runner_of_two_environments_is_about_the_machine() -> None:
    a = {"python": {"version": "3.11.7"}, "numpy": "2.4.6", "hostname": "h", "devices": []}
    b = {**a, "python": {"version": "3.12.1"}, "numpy": "2.5.0"}
    assert env_differences(a, b) == ["numpy", "python"]
    assert machine_differences(a, b) == []
    assert machine_differences(a, {**b, "hostname": "other"}) == ["hostname"]


# --- rendering and saved runs -----------------------------------------------------------------


def comparison(diff: EnvDiff | None, *, envs: bool) -> Comparison:
    def side(name: str) -> SideInfo:
        return SideInfo(
            "v1", f"x-{name}", "d", env=f"/venvs/{name}" if envs else None, python="/p/python"
        )

    return Comparison("x", side("base"), side("head"), True, (), env_diff=diff)


def test_summary_has_an_environment_difference_section_only_when_something_differs() -> None:
    diff = EnvDiff(
        python=("3.11.7", "3.12.1"),
        added={"new": "3"},
        removed={"old": "1"},
        changed={"torch": ("2.12.0", "2.13.0")},
    )
    text = comparison_markdown(comparison(diff, envs=True))
    assert "environment `/venvs/head` vs `/venvs/base` at `v1`" in text
    assert "same machine" in text
    section = text[text.index("### Environment difference") :]
    assert "| Python | 3.11.7 | 3.12.1 |" in section
    assert "| `new` | - | 3 |" in section and "| `old` | 1 | - |" in section
    assert "| `torch` | 2.12.0 | 2.13.0 |" in section
    plain = comparison_markdown(comparison(EnvDiff(), envs=False))
    assert "Environment difference" not in plain and "environment `" not in plain
    doc = comparison(diff, envs=True).to_json()
    validate_comparison(doc)
    assert Comparison.from_json(doc).to_json() == doc


def saved_run(tmp: Path, name: str, env: dict[str, Any]) -> Path:
    runs = tuple(
        Attempt("c", "cpu", i, "passed", 1, repeat=i, round=i, stages={"S": 1.0}) for i in range(3)
    )
    case = CaseResult("c", "pipeline", "cpu", "passed", attempts=runs)
    rep = RunReport(name, "t0", "t1", (), "cpu", env, (case,))
    (tmp / name).mkdir()
    (tmp / name / "report.json").write_text(json.dumps(rep.to_json()))
    return tmp / name


def test_saved_runs_keep_refusing_other_environments_and_now_say_which_packages(
    tmp_path: Path, here: dict[str, Any]
) -> None:
    a = saved_run(tmp_path, "a", here)
    knob = saved_run(
        tmp_path, "knob", {**here, "packages": {**here["packages"], "tinyav-knob": "2.0"}}
    )
    other = saved_run(
        tmp_path,
        "other",
        {**here, "numpy": "0.1", "packages": {**here["packages"], "numpy": "0.1"}},
    )
    req = CompareRequest(out_root=tmp_path / "out", noise_dir=None)
    same = compare_reports(a, knob, request=req)
    assert same.same_runner and same.env_diff is not None
    assert [c.verdict for c in same.cases] == ["no_change"]
    assert dict(same.env_diff.added) == {"tinyav-knob": "2.0"}
    refused = compare_reports(a, other, request=req)
    assert refused.env_differences == ("numpy",) and not refused.same_runner
    assert [c.verdict for c in refused.cases] == ["not_comparable"]
    assert refused.env_diff is not None
    assert dict(refused.env_diff.changed) == {"numpy": (here["packages"]["numpy"], "0.1")}
    for cmp in (same, refused):
        validate_comparison(json.loads((req.out_root / cmp.id / "comparison.json").read_text()))
