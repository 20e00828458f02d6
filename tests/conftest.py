"""Fixtures for every test folder, and the one run of the bundled suite that several test
folders assert on.

CI runs the suite with ``pytest -n 2 --dist loadgroup``: a module- or session-scoped fixture
is computed once per xdist worker that runs a test needing it, so the tests that share an
expensive fixture (a run of the bundled suite, a comparison, a set of virtual environments)
carry ``pytest.mark.xdist_group(NAME)`` and run on one worker, which computes it once. Without
``-n`` the marks change nothing. (With pytest 9.2, xdist 3.8's own grouping does not take
effect: ``_apply_xdist_groups`` below does it.)"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.execution.zygote_service import SHARED_ENV, stop_shared

REPO = Path(__file__).resolve().parents[1]
ZYGOTES = pytest.StashKey[Path]()


# Plugins of the test environment that the pytest processes the tests start never use:
# hypothesis's plugin imports hypothesis (tests/compare/test_stats.py, run in the xdist
# workers, is its only user), and anyio's; together 0.44 s of CPU per process (measured
# 2026-12-03: `pytest harness/ --collect-only` 1.14 -> 0.72 s user).
UNUSED_IN_CHILDREN = ("hypothesispytest", "anyio")


def pytest_configure(config: pytest.Config) -> None:
    """The tests start `harness` (and pytest over harness/) hundreds of times, and each process
    would start a zygote of its own that imports torch: they share them instead, through a
    folder of this session's (``HARNESS_ZYGOTE_DIR``, docs/reports-and-ci.md), set here in
    the controlling process before the xdist workers start, so that they and every process
    they start inherit it. A folder the environment names already is left as it is.

    A process that runs tests (an xdist worker, or a run without xdist) also keeps the pytest
    processes its tests start from loading :data:`UNUSED_IN_CHILDREN`, through
    ``PYTEST_ADDOPTS``; an xdist controller does not, so that its workers load them."""
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        blocked = " ".join(f"-p no:{name}" for name in UNUSED_IN_CHILDREN)
        os.environ["PYTEST_ADDOPTS"] = f"{os.environ.get('PYTEST_ADDOPTS', '')} {blocked}".strip()
    if hasattr(config, "workerinput") or os.environ.get(SHARED_ENV) is not None:
        return
    folder = Path(tempfile.mkdtemp(prefix="harness-zygotes-"))
    os.environ[SHARED_ENV] = str(folder)
    config.stash[ZYGOTES] = folder


def pytest_unconfigure(config: pytest.Config) -> None:
    folder = config.stash.get(ZYGOTES, None)
    if folder is not None:
        stop_shared(folder)
        shutil.rmtree(folder, ignore_errors=True)
        os.environ.pop(SHARED_ENV, None)


@pytest.fixture(autouse=True)
def _environment_as_before() -> Iterator[None]:
    """The test process's environment after each test is what it was before it. What a test
    sets with ``monkeypatch`` is undone anyway; this undoes what libraries set as a side
    effect, such as ``TORCHINDUCTOR_CACHE_DIR``, which torch's inductor writes into
    ``os.environ`` the first time the in-process diffusers tests import it. Every process a
    later test started in this xdist worker inherited it, so their zygotes' keys
    (harness.execution.zygote) differed from the same runs' in the other workers: 20 of the
    session's 49 zygotes had it, 4 of them started for that alone, each importing torch. And
    a test's result must not depend on which tests ran before it in the same worker."""
    before = dict(os.environ)
    yield
    before.pop("PYTEST_CURRENT_TEST", None)  # pytest's own, set per phase
    now = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    if now != before:
        for name in now.keys() - before.keys():
            del os.environ[name]
        for name, value in before.items():
            if now.get(name) != value:
                os.environ[name] = value


@pytest.fixture(autouse=True)
def _not_under_github_actions(monkeypatch: pytest.MonkeyPatch) -> None:
    """The harness's own tests run many deliberately failing cases: under GitHub Actions they
    must not annotate the pull request or append to its job summary. Tests of that behaviour
    set the variables themselves (tests/report/test_github*.py)."""
    for name in ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY", "GITHUB_WORKSPACE"):
        monkeypatch.delenv(name, raising=False)


def tree_digest(root: Path) -> str:
    """Every file's path and bytes under ``root``: equal digests, an unchanged tree."""
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(root)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()


@dataclass(frozen=True)
class BundledRun:
    """The whole bundled suite (cases/) run in this checkout as CI jobs run it, through
    `pytest harness/` (docs/reports-and-ci.md): its exit code, its output (stdout and stderr),
    run folder, and the reference store's digest before and after (a run never writes
    references)."""

    returncode: int
    output: str
    dir: Path
    references_before: str
    references_after: str


@pytest.fixture(scope="session")
def bundled_suite(tmp_path_factory: pytest.TempPathFactory) -> BundledRun:
    """The whole suite, run once per session (per xdist worker: its users are in the
    ``bundled-suite`` xdist group: ``pytest.mark.xdist_group("bundled-suite")``), with the
    command of a stack's CI job (docs/reports-and-ci.md), `pytest harness/ -n 2`: the run
    folder is the controller's merge of the two workers' parts. This run is the main job of
    this repository's CI, asserted on; .ci/run no longer runs the suite a second time.
    `harness run` of the same cases goes through the same runner (tests/e2e/
    test_simulated_suite.py runs it over the tinyav suite per platform; the scratch-copy test
    and tests/core on the CPU)."""
    out = tmp_path_factory.mktemp("bundled-suite")
    before = tree_digest(REPO / "references")
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "harness/", "-n", "2", "-q"),
            *("-p", "no:cacheprovider", "--harness-out", str(out)),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    return BundledRun(
        proc.returncode,
        proc.stdout + proc.stderr,
        out / "latest",
        before,
        tree_digest(REPO / "references"),
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under xdist, the end-to-end tests (marked ``slow``) first, in their order, then the
    rest: the long ones start while both workers are busy and the many short ones fill in at
    the end, instead of one worker finishing a long test alone. A serial run keeps the order
    as collected."""
    if not hasattr(config, "workerinput"):
        return
    if getattr(config.option, "loadgroup", False):  # set by xdist in a worker
        _apply_xdist_groups(items)
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def _apply_xdist_groups(items: list[pytest.Item]) -> None:
    """What ``--dist loadgroup`` does to a marked test's id (``ID@GROUP``, which the scheduler
    groups by), for pytest >= 9, where xdist 3.8's own renaming (``item._nodeid``) is no
    longer read: pytest 9 keeps the id in ``item._id``. A no-op where xdist already did it."""
    try:
        from _pytest.nodeid import NodeId  # pytest >= 9
    except ImportError:
        return
    for item in items:
        names = sorted({str(m.args[0]) for m in item.iter_markers("xdist_group") if m.args})
        if names and "@" not in item.nodeid:
            item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(names)}")  # type: ignore[attr-defined]
