"""``harness baselines propose`` on the planted history: budgets added into the profile's own
layout (comments kept), lowered where the data allow, per-stage-kind tolerances, each value
commented with its run ids; a window never straddles the planted step; bad flags are usage
errors."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from history_synth import Truth

from harness.cli import main as cli
from harness.history.baselines import round_up

PROFILE = """\
# a runner class
name = "cpu"
platform = "cpu"

[budgets]

[budgets.case-01]  # sized by hand in 2025
Stage03 = 0.5  # far too loose
"""


@pytest.fixture
def workdir(planted: Truth, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "runners").mkdir()
    (tmp_path / "runners" / "cpu.toml").write_text(PROFILE)
    db = tmp_path / "h.db"
    assert cli(["history", "ingest", *map(str, planted.folders), "--db", str(db), "-q"]) == 0
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_propose_writes_a_reviewable_diff_into_the_profile(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    args = ["baselines", "propose", "--db", "h.db", "--runner", "cpu", "--min-seconds", "0.03"]
    assert cli([*args, "--tolerance", "Stage03=0.5,0.01"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("--- a/runners/cpu.toml\n+++ b/runners/cpu.toml\n")
    assert "-Stage03 = 0.5  # far too loose" in out
    lowered = next(x for x in out.splitlines() if x.startswith("+Stage03 = ") and "x 1.5" in x)
    assert "from run-0040, run-0041, run-0042, run-0043, run-0044" in lowered
    assert "+[budgets.case-00]" in out and "+[budgets.case-02]" in out
    assert "1 lower" in err
    assert (workdir / "runners" / "cpu.toml").read_text() == PROFILE  # a diff, not a write

    assert cli([*args, "--write"]) == 0
    text = (workdir / "runners" / "cpu.toml").read_text()
    assert text.startswith(PROFILE.split("[budgets.case-01]")[0])  # the rest kept as it was
    assert "[budgets.case-01]  # sized by hand in 2025" in text
    budgets = tomllib.loads(text)["budgets"]
    # case-00 stepped +20 % at run 30: its budget comes from after the step only
    assert set(budgets["case-00"]) == {"Stage02", "Stage03"}  # the rest under --min-seconds
    assert budgets["case-00"]["Stage03"] + 1e-9 > 0.036 * 1.2 * 1.1
    assert budgets["case-01"]["Stage03"] == round_up(budgets["case-01"]["Stage03"])


def test_propose_refuses_bad_flags(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["baselines", "propose", "--db", "h.db", "--runner", "cpu"]
    assert cli([*base, "--allow-raise"]) == 2
    assert "--allow-raise needs --reason TEXT" in capsys.readouterr().err
    assert cli([*base, "--tolerance", "Load*=fast"]) == 2
    assert "expected GLOB=REL,PAD" in capsys.readouterr().err
    assert cli([*base[:-1], "h100"]) == 2  # no such profile in runners/
    assert cli(["baselines", "propose", "--db", "none.db", "--runner", "cpu"]) == 2
