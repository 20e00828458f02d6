"""Writing a run folder: from ``PARALLEL_MIN_CASES`` cases up, junit.xml and summary.md are
written by a forked child while report.json and index.html are written here. The files are the
same bytes either way; a child that fails is made up for here (its error raised here, the other
files still written); no child is forked beside another thread."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from reportdata import case, check, report

import harness.report.io as report_io
from harness.model import RunReport
from harness.report.io import render_run, write_run
from harness.report.junit import write_junit

FILES = ("report.json", "junit.xml", "summary.md", "index.html")


def a_report(n: int = 12) -> RunReport:
    cases = [
        case(f"c{i:02d}", "failed" if i % 5 == 0 else "passed",
             checks=(check("ssim", 0.5 + i / 100, ">=", 0.9, i % 5 != 0),))
        for i in range(n)
    ]  # fmt: skip
    return report(*cases)


def junit_writers(monkeypatch: pytest.MonkeyPatch, fail_in_child: bool = False) -> list[int]:
    """Wrap write_junit so that the pid of every process that writes junit.xml is recorded in a
    file beside it (a child's list is not this process's); ``fail_in_child``: it raises in any
    process but this one."""
    parent = os.getpid()

    def wrapped(rep: RunReport, path: Path) -> None:
        with open(path.with_name("writers"), "a") as f:
            f.write(f"{os.getpid()}\n")
        if fail_in_child and os.getpid() != parent:
            raise RuntimeError("the child's junit.xml failed")
        write_junit(rep, path)

    monkeypatch.setattr(report_io, "write_junit", wrapped)
    return []


def writers(folder: Path) -> list[int]:
    return [int(x) for x in (folder / "writers").read_text().split()]


def test_a_forked_child_writes_the_same_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rep = a_report()
    serial, forked = tmp_path / "serial", tmp_path / "forked"
    write_run(rep, serial, latest=False)  # 12 cases: under the threshold
    junit_writers(monkeypatch)
    monkeypatch.setattr(report_io, "PARALLEL_MIN_CASES", 2)
    write_run(rep, forked, latest=False)
    assert writers(forked) != [os.getpid()] and len(writers(forked)) == 1  # a child wrote it
    for name in FILES:
        assert (forked / name).read_bytes() == (serial / name).read_bytes(), name


def test_a_child_that_fails_is_made_up_for_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    junit_writers(monkeypatch, fail_in_child=True)
    monkeypatch.setattr(report_io, "PARALLEL_MIN_CASES", 2)
    write_run(a_report(), tmp_path, latest=False)
    child, here = writers(tmp_path)
    assert child != os.getpid() and here == os.getpid()
    assert all((tmp_path / name).stat().st_size > 0 for name in FILES)
    assert "<testsuite" in (tmp_path / "junit.xml").read_text()


def test_an_error_of_the_text_renderings_is_raised_here_and_the_others_are_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(rep: RunReport, path: Path) -> None:
        raise RuntimeError("junit renderer bug")

    monkeypatch.setattr(report_io, "write_junit", broken)
    for threshold in (2, 10**9):  # forked, then not
        monkeypatch.setattr(report_io, "PARALLEL_MIN_CASES", threshold)
        folder = tmp_path / str(threshold)
        with pytest.raises(RuntimeError, match="junit renderer bug"):
            write_run(a_report(), folder, latest=False)
        assert (folder / "report.json").is_file() and (folder / "index.html").is_file()
        assert not (folder / "junit.xml").exists()


def test_no_child_beside_another_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    junit_writers(monkeypatch)
    monkeypatch.setattr(report_io, "PARALLEL_MIN_CASES", 2)
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        render_run(a_report(), tmp_path)
    finally:
        stop.set()
        other.join()
    assert writers(tmp_path) == [os.getpid()]
    assert (tmp_path / "summary.md").is_file() and (tmp_path / "index.html").is_file()
