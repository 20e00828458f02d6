"""`harness compare` / `harness bisect` argument handling and the runner profile's
``[compare]`` table (no workers start)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli.compare import looks_for
from harness.errors import ProfileError, UsageError
from harness.platforms.profile import load_profile


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "expected --base REV"),
        (("--aa", "HEAD", "--base", "HEAD"), "drop --base/--head"),
        (("--head", "HEAD"), "--head needs --base"),
        (("--base", "HEAD", "--rounds", "1"), "--rounds 1"),
        (("--base", "no-such-rev-xyz"), "not a commit"),
    ],
)
def test_usage_errors_exit_2_and_say_what_was_expected(
    tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    proc = cli("compare", *args, "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr


def test_help_shows_examples(tmp_path: Path) -> None:
    for command in ("compare", "bisect"):
        proc = cli(command, "--help", cwd=tmp_path)
        assert proc.returncode == 0 and "examples:" in proc.stdout


def test_looks_are_cut_at_rounds() -> None:
    assert looks_for(None) == (3, 5, 7)
    assert looks_for(3) == (3,)
    assert looks_for(6) == (3, 5, 6)
    assert looks_for(9) == (3, 5, 7, 9)
    # beyond 7, about 1.4x further each look, so a long batch still stops early
    assert looks_for(20) == (3, 5, 7, 10, 14, 20)
    assert looks_for(24) == (3, 5, 7, 10, 14, 20, 24)
    with pytest.raises(UsageError):
        looks_for(1)


def test_profile_compare_table(tmp_path: Path) -> None:
    p = tmp_path / "r.toml"
    p.write_text('name = "r"\n[compare]\ndelta = 0.1\nmargins = { psnr = 2.0 }\n')
    prof = load_profile(p)
    assert prof.compare_delta == 0.1 and dict(prof.compare_margins) == {"psnr": 2.0}
    p.write_text('name = "r"\n[compare]\nmargin = 1\n')
    with pytest.raises(ProfileError, match=r"compare\.margin"):
        load_profile(p)


def test_the_default_code_root_is_the_bundled_target_only_where_the_repository_has_it(
    tmp_path: Path,
) -> None:
    """A project of its own (`harness init`) names its import roots per case; defaulting to
    targets/tinyav there made every `harness compare` without --code-root a usage error."""
    from harness.cli.compare import default_code_roots

    assert default_code_roots(tmp_path) == []
    (tmp_path / "targets" / "tinyav").mkdir(parents=True)
    assert default_code_roots(tmp_path) == ["targets/tinyav"]
