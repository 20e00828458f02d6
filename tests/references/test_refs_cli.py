"""``harness refs bless|verify`` through argparse: exit codes, output and --help examples."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Literal

import numpy as np
import pytest
from refs_helpers import MakeRun, video

from harness.checks.quality import NO_REFERENCE
from harness.cli import refs as cli_refs
from harness.model import CaseResult, CheckResult, RunReport
from harness.references.store import ReferenceStore


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="harness")
    sub = parser.add_subparsers(dest="command")
    cli_refs.add_parser(sub)
    return cli_refs.main_refs(parser.parse_args(argv))


def test_bless_and_verify(
    make_run: MakeRun, store_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = make_run(
        "r", {"c": {"video": ("video", video(0), {}), "mp4": ("file", np.zeros(4, np.uint8), {})}}
    )
    refs = ["--references", str(store_root)]
    assert _run(["refs", "bless", "--run", str(run), "--reason", "first", "--who", "a", *refs]) == 0
    out = capsys.readouterr().out
    assert "blessed c/any/video (video, 4 files, new)" in out and "skipped c/mp4" in out
    assert _run(["refs", "verify", *refs]) == 0
    assert "ok:" in capsys.readouterr().out

    entry = ReferenceStore(store_root).lookup("c", "video", ["any"])
    (store_root / entry.files[0].path).write_bytes(b"tampered")
    assert _run(["refs", "verify", *refs]) == 1
    assert "does not match the manifest" in capsys.readouterr().out


def test_bless_refusal_and_bad_input_exit_2(
    make_run: MakeRun, store_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blank = np.full((2, 16, 16, 3), 9, np.uint8)
    run = make_run("r", {"c": {"video": ("video", blank, {})}})
    refs = ["--references", str(store_root)]
    assert _run(["refs", "bless", "--run", str(run), "--reason", "x", *refs]) == 2
    assert "REFUSED pipeline/c[cpu]" in capsys.readouterr().out
    assert _run(["refs", "bless", "--run", str(run), *refs]) == 2  # no --reason
    assert "--reason" in capsys.readouterr().err
    assert _run(["refs", "bless", "--run", str(run), "--case", "zz", "--reason", "x", *refs]) == 2
    assert "case 'zz' is not in the run" in capsys.readouterr().err
    assert _run(["refs"]) == 2


@pytest.mark.parametrize("argv", [["refs"], ["refs", "bless"], ["refs", "verify"]])
def test_help_has_example(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        _run([*argv, "--help"])
    assert info.value.code == 0
    assert "example" in capsys.readouterr().out


def test_verify_bad_manifest_exit_1(store_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store_root.mkdir()
    (store_root / "manifest.json").write_text('{"format_version": 99}')
    assert _run(["refs", "verify", "--references", str(store_root)]) == 1
    assert "format_version 99 is not supported" in capsys.readouterr().out


def test_bless_help_states_the_rules(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        _run(["refs", "bless", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "a simulated <platform> result can never be a reference" in text
    assert "only for outputs that have no reference yet on the lookup chain" in text
    assert "with the case's own op and threshold" in text and "as a floor" in text
    assert "no longer matches the hash its attempt recorded" in text


def test_force_does_not_bless_a_simulated_run(
    make_run: MakeRun, store_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = make_run("sim", {"c": {"video": ("video", video(0), {})}}, platform="npu", simulated=True)
    argv = ["refs", "bless", "--run", str(run), "--force", "--reason", "x"]
    assert _run([*argv, "--references", str(store_root)]) == 2
    assert "REFUSED pipeline/c[npu]: a simulated npu result can never be a reference" in (
        capsys.readouterr().out
    )


def _case(cid: str, *checks: CheckResult, simulated: bool = False) -> CaseResult:
    return CaseResult(cid, "pipeline", "cpu", "failed", simulated=simulated, checks=checks)


def _check(metric: str, reason: str, policy: Literal["fail", "warn"] = "fail") -> CheckResult:
    return CheckResult(metric, metric, None, ">=", 0.9, policy, False, "video", reason)


def test_bless_hint_names_the_exact_command_for_outputs_without_a_reference() -> None:
    none_yet = _check("ssim", f"{NO_REFERENCE}: no reference for output 'video' of 'a'")
    other = _check("note.x", "obtained 1, required == 2")
    report = RunReport(
        "r1",
        "",
        "",
        (),
        "cpu",
        {},
        (
            _case("a", none_yet, _check("psnr", f"{NO_REFERENCE}: ...")),
            _case("b", none_yet, other),  # blessing would not fix b: no hint
            _case("c", none_yet, simulated=True),  # never blessed
            _case("d", none_yet, _check("clip", "below", policy="warn")),
        ),
    )
    hints = cli_refs.bless_hints(report, Path("reports/r 1"), None)
    assert hints == [
        "pipeline/a[cpu]: no reference yet; bless with harness refs bless --run 'reports/r 1' "
        "--case a --reason 'first reference'",
        "pipeline/d[cpu]: no reference yet; bless with harness refs bless --run 'reports/r 1' "
        "--case d --reason 'first reference'",
    ]
    store = cli_refs.bless_hints(report, Path("out/r1"), Path("refs"))
    assert store[0].endswith("--run out/r1 --case a --references refs --reason 'first reference'")
