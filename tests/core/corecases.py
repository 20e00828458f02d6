"""Shared helpers for the core tests: a target module and case files written into tmp_path.

A module with a unique name, not conftest: several test folders have a conftest.
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from harness.cases import load_suite
from harness.cases.plan import build_plan
from harness.execution.run import Runner, RunOptions
from harness.model import RunReport
from harness.platforms.profile import Profile, RetryPolicy
from harness.report.io import write_run

TARGETS = """
import ctypes, os, sys, time, urllib.error
from pathlib import Path
from harness import probe


def ok(x=1):
    import numpy as np
    with probe.stage("work"):
        a = np.ones((4, 4)) * x
    probe.fingerprint("a", a)
    probe.record_input("x", str(x))
    probe.output("arr", a, kind="tensor")
    probe.note("path", "eager")
    probe.note("pid", os.getpid())


def nan_output():
    import numpy as np
    probe.output("audio", np.array([0.0, float("nan"), 1.0], dtype=np.float32), kind="audio")


def hang():
    time.sleep(600)


def segv():
    ctypes.string_at(0)


def exit3():
    os._exit(3)


def sigkill():
    import signal
    os.kill(os.getpid(), signal.SIGKILL)


def kernel_fault():
    raise RuntimeError("CUDA error: an illegal memory access was encountered")


def oom_once(marker):
    # The first time, really run out of memory: allocate 2 GiB under an address-space limit of
    # what the process maps now plus 256 MiB (the soft limit only, restored after).
    import resource

    import numpy as np

    m = Path(marker)
    if not m.exists():
        m.write_text("seen")
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        with open("/proc/self/statm") as f:
            mapped = int(f.read().split()[0]) * resource.getpagesize()
        resource.setrlimit(resource.RLIMIT_AS, (mapped + (256 << 20), hard))
        try:
            big = np.ones(2 << 30, dtype=np.uint8)
            big[::4096] = 2  # touch it, in case the allocator was lazy
        finally:
            resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def bad():
    assert len("one") == 2, "one is not two"


def http_once(marker):
    m = Path(marker)
    if not m.exists():
        m.write_text("seen")
        raise urllib.error.HTTPError("https://example.invalid/wheel", 403, "Forbidden", {}, None)


def http_always(sleep=0.0):
    time.sleep(sleep)
    raise ConnectionError("HTTP 503 Service Unavailable while fetching weights")


def slow(seconds=1.0):
    time.sleep(seconds)


def cold(module="coldmod"):
    assert module not in sys.modules, f"{module} already imported: not a fresh interpreter"
    __import__(module)
    probe.note("pid", os.getpid())
"""

COLDMOD = "VALUE = 1\n"

# The toy targets use neither torch nor numpy: their workers do not import torch before their
# first case (1.7 s of CPU per worker start here; the default is tested with tinyav's cases).
TOY_RUNNER = 'name = "cpu"\nplatform = "cpu"\npreimport = []\n'


def write_toy_runner(root: Path) -> None:
    """``root``'s default runner profile (runners/cpu.toml): :data:`TOY_RUNNER`."""
    (root / "runners").mkdir()
    (root / "runners" / "cpu.toml").write_text(TOY_RUNNER)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A scratch project: targets in code/, cases in cases/, reports go to reports/."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "tmod.py").write_text(TARGETS)
    (code / "coldmod.py").write_text(COLDMOD)
    (tmp_path / "cases").mkdir()
    write_toy_runner(tmp_path)
    return tmp_path


def write_cases(project: Path, name: str, body: str) -> Path:
    path = project / "cases" / name
    path.write_text(textwrap.dedent(body))
    return path


def run_suite(
    project: Path,
    *,
    budget: float | None = None,
    retries: int = 1,
    keyword: str | None = None,
    platforms: tuple[str, ...] = ("cpu",),
) -> tuple[RunReport, Runner]:
    suite = load_suite([project / "cases"])
    assert not suite.errors, suite.errors
    runner = Runner(
        RunOptions(
            profile=Profile(retry=RetryPolicy(retries=retries), preimport=()),
            out_root=project / "reports",
            code_roots=(str(project / "code"),),
            budget_s=budget,
            cwd=str(project),
        )
    )
    runner.run_plan(build_plan(suite.cases, list(platforms), keyword))
    report = runner.finish()
    write_run(report, runner.run_dir)
    return report, runner


def by_id(report: RunReport) -> dict[str, object]:
    return {c.id: c for c in report.cases}


def workers_alive(workers: Path) -> list[str]:
    """Command lines of live (not zombie) worker processes of the run whose workers/ is given:
    a spawned worker names its stack-dump file there on its command line; one forked from the
    zygote shows the zygote's command line, and is found by the files it holds open there."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
            holds = "harness.worker" in cmd and any(
                os.readlink(fd).startswith(str(workers)) for fd in (proc / "fd").iterdir()
            )
        except OSError:
            continue
        if "harness.worker" in cmd and (str(workers) in cmd or holds) and state != "Z":
            found.append(f"{proc.name}: {cmd}")
    return found


def run_plugin(p: pytest.Pytester, *args: str) -> pytest.RunResult:
    """``pytest harness/`` in a subprocess over the temporary project ``p`` (cases/, code/)."""
    import harness

    return p.runpytest_subprocess(
        str(Path(harness.__file__).resolve().parent),
        *("--harness-cases", "cases", "--harness-code-root", "code"),
        *("--harness-out", "reports", "-p", "no:cacheprovider", f"--rootdir={p.path}"),
        # plugins it never uses (pytester drops PYTEST_ADDOPTS, which tests/conftest.py sets)
        *("-p", "no:hypothesispytest", "-p", "no:anyio"),
        *args,
    )
