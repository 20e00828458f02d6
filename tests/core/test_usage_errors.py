"""Usage errors the bad-input battery found as tracebacks (or a pass): each is one line naming
the flag, exit 2 (pytest's own usage exit, 4, for the plugin's options), before any case runs;
and an unexpected exception in any command exits 3 with its traceback, never 1."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import harness

PKG = str(Path(harness.__file__).resolve().parent)


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def one_line_naming(proc: subprocess.CompletedProcess[str], flag: str, code: int = 2) -> str:
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if flag in ln]
    assert lines, proc.stderr
    return lines[0]


@pytest.fixture
def readonly(tmp_path: Path) -> Iterator[Path]:
    """A folder this process cannot write in: chmod for a normal user, ``chattr +i`` for
    root (whom permissions do not stop); skipped where neither works."""
    d = tmp_path / "readonly"
    d.mkdir()
    d.chmod(0o555)
    immutable = False
    if os.geteuid() == 0:
        immutable = subprocess.run(["chattr", "+i", str(d)], capture_output=True).returncode == 0
    try:
        (d / "probe").write_text("x")
    except OSError:
        pass
    else:
        (d / "probe").unlink()
        pytest.skip("cannot make a folder read-only here (root without chattr)")
    yield d
    if immutable:
        subprocess.run(["chattr", "-i", str(d)], check=False)
    d.chmod(0o755)


def test_run_into_an_unwritable_out_is_one_line_naming_out(tmp_path: Path, readonly: Path) -> None:
    proc = cli("run", "--out", str(readonly / "runs"), "-q", cwd=tmp_path)
    assert "cannot write" in one_line_naming(proc, "--out")


def test_compare_into_an_unwritable_out_is_one_line_naming_out(
    tmp_path: Path, readonly: Path
) -> None:
    proc = cli("compare", "--base", "HEAD", "--out", str(readonly / "c"), "-q", cwd=tmp_path)
    one_line_naming(proc, "--out")


@pytest.mark.parametrize("flag,value", [("--runs-per-round", "0"), ("--rounds", "1")])
def test_compare_with_too_few_runs_or_rounds_is_one_line_naming_the_flag(
    tmp_path: Path, flag: str, value: str
) -> None:
    proc = cli("compare", "--base", "HEAD", flag, value, "-q", cwd=tmp_path)
    assert "expected an integer" in one_line_naming(proc, flag)


def test_an_over_long_run_id_is_one_line_naming_run_id(tmp_path: Path) -> None:
    proc = cli("run", "--out", str(tmp_path / "o"), "--run-id", "a" * 300, "-q", cwd=tmp_path)
    assert "at most" in one_line_naming(proc, "--run-id")


def test_a_code_root_that_does_not_exist_is_one_line_naming_code_root(tmp_path: Path) -> None:
    proc = cli(
        "run", "--out", str(tmp_path / "o"), "--code-root", str(tmp_path / "nope"), cwd=tmp_path
    )
    assert "does not exist" in one_line_naming(proc, "--code-root")


def test_bless_into_a_store_it_cannot_write_is_one_line_naming_references(
    tmp_path: Path, readonly: Path
) -> None:
    proc = cli(
        "refs", "bless", "--run", str(tmp_path), "--references", str(readonly),
        "--reason", "r", cwd=tmp_path,
    )  # fmt: skip
    one_line_naming(proc, "--references")


def test_bisect_of_an_unknown_case_is_one_line_naming_it(tmp_path: Path) -> None:
    (tmp_path / "cases").mkdir()
    (tmp_path / "cases" / "a.toml").write_text('id = "known"\nkind = "loader"\ntarget = "m:f"\n')
    proc = cli("bisect", "nosuchcase", "--good", "HEAD~1", "--bad", "HEAD", cwd=tmp_path)
    line = one_line_naming(proc, "nosuchcase")
    assert "CASE" in line and "known" in line


def test_compare_of_case_files_that_fail_to_load_names_them(tmp_path: Path) -> None:
    git_repo(tmp_path)
    bad = tmp_path / "bad.toml"
    bad.write_text('id = "x"\nkind = "nonsense"\n')
    proc = cli(
        "compare", str(bad), "--base", "HEAD", "--code-root", ".", "--out", str(tmp_path / "o"),
        cwd=tmp_path,
    )  # fmt: skip
    line = one_line_naming(proc, "bad.toml")
    assert "failed to load" in line and "kind" in line


def git_repo(path: Path) -> None:
    """A git repository at ``path`` with one (empty) commit."""
    for args in (
        ["init", "-q"],
        ["-c", "user.email=t@e", "-c", "user.name=t", "commit", "-q", "--allow-empty", "-m", "a"],
    ):
        subprocess.run(["git", "-C", str(path), *args], check=True)


def pytest_run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", PKG, f"--rootdir={tmp_path}", "-p", "no:cacheprovider",
         "--harness-cases", str(tmp_path), *args],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_pytest_with_a_bogus_platform_is_a_usage_error(tmp_path: Path) -> None:
    proc = pytest_run(tmp_path, "--harness-platform", "bogus")
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR, proc.stdout + proc.stderr
    assert "--harness-platform 'bogus'" in proc.stderr and "cpu" in proc.stderr


def test_pytest_harness_rounds_out_of_range_is_a_usage_error(tmp_path: Path) -> None:
    proc = pytest_run(tmp_path, "--harness-rounds", "1")
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR, proc.stdout + proc.stderr
    assert "--harness-rounds 1: expected an integer from 2 to 200" in proc.stderr


def test_pytest_harness_base_with_an_unknown_revision_is_a_usage_error(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    proc = pytest_run(tmp_path, "--harness-base", "no-such-rev-xyz")
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR, proc.stdout + proc.stderr
    assert "--harness-base no-such-rev-xyz" in proc.stderr and "not a commit" in proc.stderr


def test_an_unexpected_exception_exits_3_with_its_traceback(tmp_path: Path) -> None:
    # A harness bug (here planted in `harness plan`) must never read as a regression (1).
    code = (
        "import sys, harness.cli.plan as p\n"
        "def boom(args): raise RuntimeError('planted bug')\n"
        "p.main = boom\n"
        "from harness.cli import main\n"
        "sys.exit(main(['plan']))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" in proc.stderr and "RuntimeError: planted bug" in proc.stderr
    assert "internal error" in proc.stderr
