"""The hang diagnosis on real processes: a process group of a quiet parent (rank 0, the
started process) and a busy child (``RANK=1``) that writes its log all the time. CPU use and
log growth are read from /proc and the files; stacks from py-spy where it is on PATH; the
fallbacks (py-spy refusing ``--native``, a dump over the cap, a dump past the deadline, a
device tool) through small stand-in scripts, named "simulated"."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from harness.model.hang import HangDiagnosis, ProcessDiagnosis
from harness.worker.hang_diagnosis import diagnose

TREE = textwrap.dedent(
    """
    import os, subprocess, sys, time

    def idle_parent():
        while True:
            time.sleep(0.05)

    def busy_child():
        i = 0
        while True:
            i += 1
            if i % 20000 == 0:
                print(f"tick {i}", flush=True)

    if sys.argv[1] == "child":
        busy_child()
    with open(sys.argv[2], "wb") as log:
        subprocess.Popen([sys.executable, __file__, "child"], stdout=log,
                         env=dict(os.environ, RANK="1"))
    print("parent up", flush=True)
    idle_parent()
    """
)


class Tree:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        script = folder / "tree.py"
        script.write_text(TREE)
        self.parent_log, self.child_log = folder / "parent.log", folder / "child.log"
        with self.parent_log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, str(script), "parent", str(self.child_log)],
                stdout=out,
                start_new_session=True,
            )
        # ready once both have written: the child's first tick, the parent's line
        while not (self.child_log.exists() and self.child_log.stat().st_size > 0):
            assert self.proc.poll() is None
            subprocess.run(["sleep", "0.05"], check=True)
        while self.parent_log.stat().st_size == 0:
            subprocess.run(["sleep", "0.05"], check=True)

    def diagnose(self, which: Callable[[str], str | None], **kw: float | str) -> HangDiagnosis:
        d = diagnose(self.proc.pid, trigger="test", which=which, **kw)  # type: ignore[arg-type]
        assert len(d.processes) == 2, d
        return d


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tree]:
    t = Tree(tmp_path_factory.mktemp("tree"))
    yield t
    os.killpg(t.proc.pid, signal.SIGKILL)
    t.proc.wait()


def by_rank(d: HangDiagnosis) -> tuple[ProcessDiagnosis, ProcessDiagnosis]:
    parent, child = d.processes
    assert (parent.rank, child.rank) == (0, 1), d
    return parent, child


def nothing(name: str) -> None:
    return None


def stand_in(folder: Path, name: str, body: str) -> str:
    path = folder / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return str(path)


def test_cpu_use_and_log_growth_are_read_from_real_processes(tree: Tree) -> None:
    d = tree.diagnose(nothing, window_s=1.0)
    parent, child = by_rank(d)
    assert parent.rank_source.startswith("the started process")
    assert child.rank_source == "RANK in its environment"
    # the busy child used CPU in the window, the sleeping parent (next to) none
    assert child.cpu_percent is not None and parent.cpu_percent is not None
    assert child.cpu_percent > parent.cpu_percent
    # each process's log is the file its stdout goes to
    assert (parent.log, child.log) == (str(tree.parent_log), str(tree.child_log))
    assert child.log_growing is True and child.log_grew_bytes > 0
    assert parent.log_growing is False and parent.log_grew_bytes == 0
    assert parent.last_line == "parent up" and child.last_line.startswith("tick ")
    assert parent.last_line_age_s is not None and parent.last_line_age_s >= 0
    assert d.logs_growing
    # no py-spy, no SIGUSR1 handler: no stacks, and neither process was sent a fatal signal
    for p in d.processes:
        assert p.stack_method == "not available"
        assert p.stack_notes == (
            "py-spy: not on PATH; faulthandler: the process does not catch SIGUSR1 (no handler)"
        )
    assert tree.proc.poll() is None and os.path.exists(f"/proc/{child.pid}")
    assert d.device == "not available here" and not d.unfinished


@pytest.mark.skipif(shutil.which("py-spy") is None, reason="py-spy is not on PATH")
def test_py_spy_names_the_function_every_process_is_in(tree: Tree) -> None:
    parent, child = by_rank(tree.diagnose(shutil.which, window_s=0.1))
    assert parent.stack_method == child.stack_method == "py-spy --native"
    assert parent.where.startswith("idle_parent (tree.py:"), parent.stack
    assert child.where.startswith("busy_child (tree.py:"), child.stack


def test_py_spy_refusing_native_falls_back_to_python_only_simulated(
    tree: Tree, tmp_path: Path
) -> None:
    fake = stand_in(
        tmp_path,
        "py-spy",
        'case "$*" in *--native*) echo "Permission Denied: try sudo" >&2; exit 1;; esac\n'
        'printf "Thread 1 (idle)\\n    wait_here (srv.py:9)\\n"',
    )
    parent, _ = by_rank(tree.diagnose(lambda n: fake if n == "py-spy" else None, window_s=0.05))
    assert parent.stack_method == "py-spy"
    assert parent.stack_notes == "py-spy --native: exit 1: Permission Denied: try sudo"
    assert parent.where == "wait_here (srv.py:9)"


def test_a_dump_is_capped_and_one_past_the_deadline_is_cut_simulated(
    tree: Tree, tmp_path: Path
) -> None:
    big = stand_in(tmp_path, "big", "head -c 5000 /dev/zero | tr '\\0' x")
    parent, _ = by_rank(
        tree.diagnose(lambda n: big if n == "py-spy" else None, window_s=0.05, cap=1000)
    )
    assert parent.stack == "x" * 1000 + "\n... (cut at 1000 bytes)"
    slow = stand_in(tmp_path, "slow", "exec sleep 30")
    d = tree.diagnose(lambda n: slow if n == "py-spy" else None, deadline_s=1.0)
    assert d.unfinished.startswith("stacks of pid ")
    for p in d.processes:
        assert "py-spy --native: did not finish within the diagnosis deadline" in p.stack_notes


def test_the_platform_device_tool_is_read_or_not_available_here_simulated(
    tree: Tree, tmp_path: Path
) -> None:
    smi = stand_in(tmp_path, "nvidia-smi", 'printf "index, utilization.gpu [%%]\\n0, 97 %%\\n"')
    d = tree.diagnose(lambda n: smi if n == "nvidia-smi" else None, platform="cuda", window_s=0.05)
    assert (d.device, d.device_tool) == ("index, utilization.gpu [%]\n0, 97 %", "nvidia-smi")
    d = tree.diagnose(nothing, platform="hip", window_s=0.05)
    assert d.device == "not available here (rocm-smi is not on PATH)"
