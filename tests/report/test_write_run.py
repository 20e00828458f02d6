"""Writing a run folder: from ``PARALLEL_MIN_CASES`` cases up, junit.xml and summary.md are
written by a forked child while report.json and index.html are written here. The files are the
same bytes either way; a child that fails is made up for here (its error raised here, the other
files still written); no child is forked beside another thread.

Each scenario runs in a fresh interpreter (``python -c``): a pytest-xdist worker runs threads of
its own, beside which the harness never forks, so the forked path is only reachable outside it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent

SCENARIO = r"""
import json, os, sys, threading
from pathlib import Path
from reportdata import case, check, report
import harness.report.io as report_io
from harness.report.junit import write_junit

mode, out = sys.argv[1], Path(sys.argv[2])
parent = os.getpid()
rep = report(*[
    case(f"c{i:02d}", "failed" if i % 5 == 0 else "passed",
         checks=(check("ssim", 0.5 + i / 100, ">=", 0.9, i % 5 != 0),))
    for i in range(12)
])

def wrapped(r, path, fail_in_child=mode == "child fails"):
    # every process that writes junit.xml leaves its pid beside it
    with open(path.with_name("writers"), "a") as f:
        f.write(f"{os.getpid()}\n")
    if mode == "broken" or (fail_in_child and os.getpid() != parent):
        raise RuntimeError("junit renderer bug")
    write_junit(r, path)

facts = {"pid": parent}
if mode == "same bytes":  # 12 cases: under the threshold, then over a lowered one
    report_io.write_run(rep, out / "serial", latest=False)
report_io.write_junit = wrapped
report_io.PARALLEL_MIN_CASES = 2
if mode == "thread":
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
folder = out / ("forked" if mode == "same bytes" else "run")
try:
    report_io.write_run(rep, folder, latest=False)
except RuntimeError as exc:
    facts["raised"] = str(exc)
if mode == "thread":
    stop.set()
    other.join()
writers = folder / "writers"
facts["writers"] = [int(x) for x in writers.read_text().split()] if writers.exists() else []
facts["files"] = sorted(p.name for p in folder.iterdir() if p.name != "writers")
print(json.dumps(facts))
"""

FILES = ["index.html", "junit.xml", "report.json", "summary.md"]


def scenario(mode: str, out: Path) -> dict[str, Any]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.run(
        [sys.executable, "-c", SCENARIO, mode, str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    facts: dict[str, Any] = json.loads(proc.stdout.splitlines()[-1])
    return facts


needs_two_cpus = pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2 if hasattr(os, "sched_getaffinity") else True,
    reason="the child is forked only where two CPUs or more are there",
)


@needs_two_cpus
def test_a_forked_child_writes_the_same_bytes(tmp_path: Path) -> None:
    facts = scenario("same bytes", tmp_path)
    (writer,) = facts["writers"]
    assert writer != facts["pid"]  # a child wrote junit.xml
    for name in FILES:
        forked = (tmp_path / "forked" / name).read_bytes()
        assert forked == (tmp_path / "serial" / name).read_bytes(), name


@needs_two_cpus
def test_a_child_that_fails_is_made_up_for_here(tmp_path: Path) -> None:
    facts = scenario("child fails", tmp_path)
    child, here = facts["writers"]
    assert child != facts["pid"] and here == facts["pid"]
    assert "raised" not in facts and facts["files"] == FILES
    assert "<testsuite" in (tmp_path / "run" / "junit.xml").read_text()


@needs_two_cpus
@pytest.mark.parametrize("mode", ["broken", "thread"])
def test_an_error_is_raised_here_and_no_child_beside_another_thread(
    tmp_path: Path, mode: str
) -> None:
    """``broken``: junit.xml's renderer raises wherever it runs (a child first, then here):
    the error is raised here and the other files are written. ``thread``: beside another
    thread nothing is forked, this process writes every file."""
    facts = scenario(mode, tmp_path)
    if mode == "broken":
        assert facts["raised"] == "junit renderer bug"
        assert facts["files"] == ["index.html", "report.json"]
        child, here = facts["writers"]  # tried in a child first, then here
        assert child != facts["pid"] and here == facts["pid"]
    else:
        assert facts["writers"] == [facts["pid"]] and facts["files"] == FILES
