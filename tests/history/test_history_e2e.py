"""The history end to end on real run folders: ``harness run`` at five commits of a scratch
repository with a planted slowdown (tests/history/scratch.py), then ``history ingest``,
``history check``, ``history site`` (opened in the real browser) and ``baselines propose``
through the CLI's entry point (in this process: the runs' own ``harness run`` processes are
what costs; the commands are the same ``main`` the console script calls)."""

from __future__ import annotations

import contextlib
import io
import os
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from scratch import History, make_history

from harness.cli import main

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("history-e2e")]
pytest.importorskip(
    "otava.analysis", reason="apache-otava is not installed: pip install --no-deps apache-otava"
)


@dataclass
class Done:
    returncode: int
    stdout: str
    stderr: str


def cli(*args: str, cwd: Path) -> Done:
    """``harness ARGS`` in ``cwd``: exit code, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    old = Path.cwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(args))
    finally:
        os.chdir(old)
    return Done(code, out.getvalue(), err.getvalue())


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> History:
    return make_history(tmp_path_factory.mktemp("history-e2e"))


@pytest.fixture(scope="module")
def db(history: History) -> Path:
    path = history.runs.parent / "history.db"
    proc = cli("history", "ingest", str(history.runs), "--db", str(path), cwd=history.repo)
    assert proc.returncode == 0, proc.stderr
    assert "5 run(s) ingested, 0 already there, 0 refused" in proc.stdout
    return path


def test_check_finds_the_planted_slowdown_with_its_input_hint_and_bisect(
    history: History, db: Path
) -> None:
    proc = cli("history", "check", "--db", str(db), cwd=history.repo)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = proc.stdout
    good, bad = history.commits["h2"][:12], history.commits["h3"][:12]
    assert "REGRESSION loader/mini[cpu] on cpu (" in out
    assert f"{good}..{bad} (last run before: h2, first after: h3)" in out
    work = next(line for line in out.splitlines() if "stage work:" in line)
    step = float(work.split(": +")[1].split("%")[0].replace(",", ""))
    assert step > 300  # 4 ms -> 60 ms
    assert "first divergence: input 'prompt' differs across the step" in out
    pin = next(line for line in out.splitlines() if "pin it: " in line).split("pin it: ")[1]
    assert shlex.split(pin) == [
        "harness",
        "bisect",
        "--good",
        good,
        "--bad",
        bad,
        "mini",
        "--runner",
        "cpu",
        "--platform",
        "cpu",
    ]
    # only the docs commit after the step: nothing new since the slow commit
    since = cli("history", "check", "--db", str(db), "--since", bad, cwd=history.repo)
    assert since.returncode == 0 and "0 regression(s)" in since.stdout


def test_baselines_propose_from_the_green_runs_never_raising_silently(
    history: History, db: Path
) -> None:
    proc = cli("baselines", "propose", "--db", str(db), "--runner", "cpu", cwd=history.repo)
    assert proc.returncode == 0, proc.stderr
    assert "would raise budgets.mini.work from 0.02 to " in proc.stderr
    assert "the largest median of h3, h4, h5 is" in proc.stderr
    assert proc.stdout.startswith("no change to ")
    raised = cli(
        "baselines",
        "propose",
        "--db",
        str(db),
        "--runner",
        "cpu",
        "--allow-raise",
        "--reason",
        "planted slowdown accepted",
        "--write",
        cwd=history.repo,
    )
    assert raised.returncode == 0, raised.stderr
    assert "-work = 0.02" in raised.stdout
    line = next(x for x in raised.stdout.splitlines() if x.startswith("+work = "))
    assert "from h3, h4, h5" in line and "raised from 0.02: planted slowdown accepted" in line
    value = float(line.split("=")[1].split("#")[0])
    assert 0.06 * 1.1 < value < 0.2
    # the written profile is one the harness loads, with that budget
    from harness.platforms.profile import load_profile

    assert load_profile(history.repo / "runners" / "cpu.toml").budgets["mini"]["work"] == value


CHROMIUM = os.environ.get("HARNESS_CHROMIUM") or shutil.which("chromium")


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (apt-get install chromium)")
def test_the_site_in_the_browser(history: History, db: Path, tmp_path: Path) -> None:
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    out = history.runs.parent / "site"
    proc = cli("history", "site", "--db", str(db), "--out", str(out), cwd=history.repo)
    assert proc.returncode == 0, proc.stderr
    assert "2 page(s)" in proc.stdout
    problems: list[str] = []
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: problems.append(str(e)))

        def route(r: Any) -> None:
            if r.request.url.startswith("file://"):
                r.continue_()
            else:
                problems.append(f"remote: {r.request.url}")
                r.abort()

        page.route("**/*", route)
        page.goto((out / "index.html").as_uri(), wait_until="load")
        csp = page.get_attribute('meta[http-equiv="Content-Security-Policy"]', "content")
        assert csp is not None and "default-src 'none'" in csp and "script-src 'none'" in csp
        first = page.inner_text("#changes tbody tr:first-child")
        assert "loader/mini[cpu]" in first
        changes = page.inner_text("#changes")
        assert "stage work" in changes and "(h2 .. h3)" in changes
        assert page.locator("#cases svg.spark").count() >= 3  # pass rate, work, total, check
        page.screenshot(path=str(tmp_path / "history-index.png"), full_page=True)
        page.click("#changes tbody tr:first-child a")
        page.wait_for_load_state("load")
        assert page.inner_text("h1") == "loader/mini[cpu]"
        assert page.inner_text(".flake7") == "0/5 (0%)"
        assert page.locator("svg.chart rect.cp-bad").count() >= 1
        assert "REGRESSION" in page.inner_text(".cp-line >> nth=0")
        href = page.get_attribute("table.runs tbody tr:first-child a", "href")
        assert href is not None
        assert (out / "cases" / href).resolve() == (history.runs / "h5" / "index.html").resolve()
        page.click("table.runs tbody tr:first-child a")
        page.wait_for_load_state("load")
        assert "harness run" in page.title()  # the run's own report opens
        page.screenshot(path=str(tmp_path / "history-case.png"), full_page=True)
        shots = os.environ.get("HARNESS_SCREENSHOT_DIR")
        if shots:
            Path(shots).mkdir(parents=True, exist_ok=True)
            for name in ("history-index.png", "history-case.png"):
                shutil.copy(tmp_path / name, Path(shots) / name)
        browser.close()
    assert problems == []
