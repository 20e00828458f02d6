"""``harness history check`` on a planted history: the +20 % step of case-00 is found at its
commit range with its size, significance, first divergence and the bisect that would pin it;
the flaky period of case-01 is not a change point; what was already there is not new."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from histories import STEP_AT
from history_synth import Truth

from harness.cli import build_parser
from harness.cli import main as cli
from harness.cli.tree import check_command_line

pytest.importorskip(
    "otava.analysis", reason="apache-otava is not installed: pip install --no-deps apache-otava"
)


def test_check_reports_new_steps_once_with_range_size_hint_and_bisect(
    planted: Truth, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "h.db")
    before = [str(f) for f in planted.folders[:STEP_AT]]
    after = [str(f) for f in planted.folders[STEP_AT:]]
    assert cli(["history", "ingest", *before, "--db", db, "-q"]) == 0
    assert cli(["history", "check", "--db", db]) == 0  # no step in the first 30 runs
    out = capsys.readouterr().out
    assert "0 new change point(s), 0 regression(s)" in out

    assert cli(["history", "ingest", *after, "--db", db, "-q"]) == 0
    assert cli(["history", "check", "--db", db]) == 1
    out = capsys.readouterr().out
    good, bad = planted.commits[STEP_AT - 1][:12], planted.commits[STEP_AT][:12]
    assert (
        f"REGRESSION pipeline/case-00[cpu] on cpu (Linux-x86_64): {good}..{bad} "
        f"(last run before: run-{STEP_AT - 1:04d}, first after: run-{STEP_AT:04d})"
    ) in out
    total = next(line for line in out.splitlines() if "stage total:" in line)
    step = float(total.split(": +")[1].split("%")[0])
    assert 15 < step < 25 and "(p = " in total
    assert "first divergence: stage fingerprint 'Stage01' differs across the step" in out
    assert "case-01" not in out and "case-02" not in out  # the flaky period is no step
    pin = next(line for line in out.splitlines() if "pin it: " in line).split("pin it: ")[1]
    argv = shlex.split(pin)
    assert argv[:2] == ["harness", "bisect"]
    args = check_command_line(build_parser(), argv[1:])
    assert (args.good, args.bad, args.case, args.runner) == (good, bad, "case-00", "cpu")

    # --since the step's own commit: nothing after it is new
    assert cli(["history", "check", "--db", db, "--since", bad[:8]]) == 0
    assert cli(["history", "check", "--db", db, "--since", f"run-{STEP_AT - 3:04d}"]) == 1
    assert cli(["history", "check", "--db", db, "--since", "no-such-rev"]) == 2
    assert "--since no-such-rev: no ingested run has that commit or run id" in (
        capsys.readouterr().err
    )


def test_check_of_a_missing_database_is_an_input_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(["history", "check", "--db", str(tmp_path / "none.db")]) == 2
    assert "no such history database" in capsys.readouterr().err
