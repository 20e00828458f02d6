"""Progress lines as a CI log shows them, and the live bar drawn without error."""

from __future__ import annotations

import pytest

from harness.cli.progress import ProgressDisplay


def test_plain_lines_for_logs(capsys: pytest.CaptureFixture[str]) -> None:
    with ProgressDisplay(2, live=False) as display:
        display.item(1, 2, "loader/a[cpu]")
        display.line("loader/a[cpu] #0: passed (0.01 s)")
    err = capsys.readouterr().err.splitlines()
    assert err[0].endswith("[1/2] loader/a[cpu]")
    assert err[1].endswith("loader/a[cpu] #0: passed (0.01 s)")
    assert err[0].startswith("[") and "s]" in err[0]


def test_live_bar_keeps_event_lines(capsys: pytest.CaptureFixture[str]) -> None:
    with ProgressDisplay(2, live=True) as display:
        display.item(1, 2, "loader/a[cpu]")
        display.line("loader/a[cpu] #0: passed")
        display.item(2, 2, "loader/b[cpu]")
    assert "loader/a[cpu] #0: passed" in capsys.readouterr().err
