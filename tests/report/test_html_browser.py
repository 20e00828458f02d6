"""The HTML reports in a real headless browser: Debian's chromium driven by playwright (through
``executable_path``; ``playwright install`` is never used). Skipped, with the reason, where
either is missing. Screenshots go to the test's tmp folder and, when ``HARNESS_SCREENSHOT_DIR``
is set, there too (CI keeps them)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from reportruns import INJECTION, Reports

NAME = f"loader/{INJECTION}[cpu]"  # the injection case's display name

# the runs and comparison of the `reports` fixture: built once, on one xdist worker
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("reports")]

CHROMIUM = os.environ.get("HARNESS_CHROMIUM") or shutil.which("chromium")
if CHROMIUM is None:
    pytest.skip(
        "no chromium on PATH (apt-get install chromium, or set HARNESS_CHROMIUM)",
        allow_module_level=True,
    )
sync_api = pytest.importorskip(
    "playwright.sync_api", reason="the playwright package is not installed (pip install .[dev])"
)


@dataclass
class Watch:
    """Everything the page did that a self-contained, inert report must not do."""

    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    remote: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)

    def assert_clean(self) -> None:
        assert self.console_errors == [], self.console_errors
        assert self.page_errors == [], self.page_errors
        assert self.failed == [], self.failed
        assert self.remote == [], self.remote
        assert self.dialogs == [], self.dialogs


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        print(f"browser: {CHROMIUM}, version {b.version}")
        yield b
        b.close()


def open_page(browser: Any, path: Path) -> tuple[Any, Watch]:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    w = Watch()
    page.on("console", lambda m: w.console_errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: w.page_errors.append(str(e)))
    page.on("requestfailed", lambda r: w.failed.append(f"{r.url}: {r.failure}"))

    def on_dialog(d: Any) -> None:
        w.dialogs.append(d.message)
        d.dismiss()

    page.on("dialog", on_dialog)

    def route(r: Any) -> None:
        if r.request.url.startswith("file://"):
            r.continue_()
        else:
            w.remote.append(r.request.url)
            r.abort()

    page.route("**/*", route)
    page.goto(path.resolve().as_uri(), wait_until="load")
    return page, w


def screenshot(page: Any, tmp_path: Path, name: str) -> None:
    shot = tmp_path / name
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 0
    out = os.environ.get("HARNESS_SCREENSHOT_DIR")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(out) / name)


def visible_names(page: Any) -> list[str]:
    return page.eval_on_selector_all(
        "#cases tbody tr:not([hidden])", "rows => rows.map(r => r.dataset.name)"
    )


def assert_images_and_plots_show(page: Any) -> None:
    widths = page.eval_on_selector_all("img", "imgs => imgs.map(i => i.naturalWidth)")
    assert len(widths) >= 9 and all(w > 0 for w in widths), widths
    boxes = page.eval_on_selector_all(
        "svg.plot", "svgs => svgs.map(s => s.getBoundingClientRect().width)"
    )
    assert boxes and all(b > 0 for b in boxes), boxes


def test_run_report_in_a_browser(browser: Any, reports: Reports, tmp_path: Path) -> None:
    page, watch = open_page(browser, reports.run / "index.html")
    assert_images_and_plots_show(page)
    names = visible_names(page)
    assert NAME in names and "pipeline/t2va-int8[cpu]" in names

    # the injection case is inert text: shown as written, no script of it ran
    cell = page.locator("#cases tbody tr", has_text="alert(1)").first
    assert INJECTION in cell.inner_text()
    assert page.evaluate("document.querySelectorAll('script').length") == 1
    assert page.locator("text=worker says <script>alert(1)</script>").count() >= 1

    # filtering by kind, by status, and by clicking a count in the summary bar
    page.select_option("#filter-kind", "loader")
    assert visible_names(page) == [NAME]
    assert page.locator("section.case:not([hidden])").count() == 1
    page.select_option("#filter-kind", "")
    page.select_option("#filter-status", "failed")
    assert NAME in visible_names(page)
    assert all(
        s == "failed"
        for s in page.eval_on_selector_all(
            "#cases tbody tr:not([hidden])", "rows => rows.map(r => r.dataset.status)"
        )
    )
    page.select_option("#filter-status", "")
    page.fill("#filter-text", "t2va")
    assert visible_names(page) == ["pipeline/t2va-int8[cpu]"]
    page.fill("#filter-text", "")
    assert len(visible_names(page)) == 2

    # sorting by seconds: the injection case (9.5 s) last ascending, first descending
    header = page.locator("#cases thead th", has_text="seconds")
    header.click()
    assert visible_names(page)[-1] == NAME
    header.click()
    assert visible_names(page)[0] == NAME
    page.locator("#cases thead th", has_text="case").click()
    assert visible_names(page) == sorted(visible_names(page))

    screenshot(page, tmp_path, "run-report.png")
    watch.assert_clean()


def test_comparison_report_in_a_browser(browser: Any, reports: Reports, tmp_path: Path) -> None:
    page, watch = open_page(browser, reports.comparison / "index.html")
    assert_images_and_plots_show(page)
    assert page.locator("svg.strip").count() >= 3
    assert page.locator("svg.strip circle").count() >= 12  # 2 sides x 2 repeats x 3+ stages
    verdicts = page.eval_on_selector_all(
        "#cases tbody tr", "rows => rows.map(r => r.dataset.verdict)"
    )
    assert verdicts
    page.select_option("#filter-verdict", verdicts[0])
    assert len(visible_names(page)) == verdicts.count(verdicts[0])
    page.locator("#summary button").first.click()  # a verdict count filters too
    assert page.input_value("#filter-verdict") == ""  # clicking the one chosen clears it
    screenshot(page, tmp_path, "comparison-report.png")
    watch.assert_clean()


def test_side_run_report_in_a_browser(browser: Any, reports: Reports, tmp_path: Path) -> None:
    page, watch = open_page(browser, reports.base / "index.html")
    assert_images_and_plots_show(page)
    screenshot(page, tmp_path, "base-run-report.png")
    watch.assert_clean()
