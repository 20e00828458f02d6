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
from reportdata import hang_case
from reportruns import INJECTION, Reports, injection_case

from harness.model import Attempt, CaseResult, RunReport
from harness.report.html import write_run_html

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
expect = sync_api.expect


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
        # file access from files: a canvas may read the pixels of the page's own images
        args = ["--no-sandbox", "--allow-file-access-from-files"]
        b = p.chromium.launch(executable_path=CHROMIUM, args=args)
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
    page.wait_for_function("Array.from(document.images).every(i => i.complete)")
    widths = page.eval_on_selector_all("img", "imgs => imgs.map(i => i.naturalWidth)")
    assert len(widths) >= 6 and all(w > 0 for w in widths), widths
    boxes = page.eval_on_selector_all(
        "svg.plot", "svgs => svgs.map(s => s.getBoundingClientRect().width)"
    )
    assert boxes and all(b > 0 for b in boxes), boxes


# The largest channel value of each image, read back from a canvas it is drawn on.
HEAT_MAX = """imgs => imgs.map(img => {
  const c = document.createElement("canvas");
  c.width = img.naturalWidth; c.height = img.naturalHeight;
  const g = c.getContext("2d");
  g.drawImage(img, 0, 0);
  const px = g.getImageData(0, 0, c.width, c.height).data;
  let m = 0;
  for (let i = 0; i < px.length; i += 4) { m = Math.max(m, px[i], px[i + 1], px[i + 2]); }
  return m;
})"""


def test_run_report_in_a_browser(browser: Any, reports: Reports, tmp_path: Path) -> None:
    page, watch = open_page(browser, reports.run / "index.html")
    assert_images_and_plots_show(page)
    names = visible_names(page)
    assert NAME in names and "pipeline/t2va-int8[cpu]" in names

    # the injection case is inert text: shown as written, no script of it ran
    cell = page.locator("#cases tbody tr", has_text="alert(1)").first
    assert INJECTION in cell.inner_text()
    assert page.evaluate("document.querySelectorAll('script:not([type])').length") == 1
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

    # the cases' tables, drawn from the page's data when a case opens (both are open)
    pipeline = page.locator("section.case", has_text="pipeline/t2va-int8[cpu]").first
    assert pipeline.locator("table.checks td", has_text="ssim(video)").count() == 1
    assert pipeline.locator("table.stages td", has_text="DenoisingStage").count() >= 1
    assert pipeline.locator("figure", has_text="identical").count() == 3
    # an error is one line in its table; the whole message one click away
    evil = page.locator("section.case", has_text="loader/").first
    cell = evil.locator("table.attempts td").last
    assert cell.locator("details.error").count() == 1
    assert not cell.locator("details.error pre").first.is_visible()
    cell.locator("details.error > summary").click()
    assert "log: /elsewhere/workers/evil-cpu-001.log" in cell.locator("pre").first.inner_text()

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
    # head differs from base by 1/255 (reportruns.nudge_video): every heat map shows it
    maxima = page.eval_on_selector_all('img[alt^="|head - base|"]', HEAT_MAX)
    assert len(maxima) == 3 and all(m == 255 for m in maxima), maxima
    assert page.locator("figure.heat .scale", has_text="0.0039 (1/255)").count() == 3
    screenshot(page, tmp_path, "comparison-report.png")
    watch.assert_clean()


def test_side_run_report_in_a_browser(browser: Any, reports: Reports, tmp_path: Path) -> None:
    page, watch = open_page(browser, reports.base / "index.html")
    assert_images_and_plots_show(page)
    screenshot(page, tmp_path, "base-run-report.png")
    watch.assert_clean()


def test_a_case_is_drawn_when_it_is_opened(browser: Any, tmp_path: Path) -> None:
    passed = [
        CaseResult(f"quant/q{i}", "quant", "cpu", "passed", seed=i,
                   attempts=(Attempt(f"quant/q{i}", "cpu", 0, "passed", i,
                                     stages={"LoadStage": 0.01 * i}),))
        for i in range(30)
    ]  # fmt: skip
    report = RunReport("lazy", "2026-01-01T00:00:00+00:00", "2026-01-01T00:01:00+00:00",
                       ("harness", "run"), "cpu", {},
                       cases=(*passed, injection_case()))  # fmt: skip
    page, watch = open_page(browser, write_run_html(report, tmp_path))
    assert page.locator("div.detail").count() == 1  # only the failed case is open and drawn
    q3 = page.locator("#case-3")
    assert q3.locator("table").count() == 0
    # a details element's toggle event and the hashchange are queued tasks, not part of the
    # click: expect() waits (up to 5 s) for the drawing they start, count() would not
    q3.locator("summary").first.click()
    expect(q3.locator("table.stages td", has_text="LoadStage")).to_have_count(1)
    expect(q3.locator("p.meta", has_text="seed 3")).to_have_count(1)
    page.locator("#cases a", has_text="quant/q7").click()  # a link to a case opens it
    expect(page.locator("#case-7 details[data-case]")).to_have_attribute("open", "")
    expect(page.locator("#case-7 table.stages")).to_have_count(1)
    q3.locator("summary").first.click()  # closed and opened again: drawn once
    expect(q3.locator("details[data-case]")).not_to_have_attribute("open", "")
    q3.locator("summary").first.click()
    expect(q3.locator("details[data-case]")).to_have_attribute("open", "")
    page.wait_for_timeout(200)  # a second drawing, were there one, would be queued by now
    assert q3.locator("div.detail").count() == 1
    watch.assert_clean()


def test_a_two_rank_hang_shows_both_ranks_stacks_and_log_tails(
    browser: Any, tmp_path: Path
) -> None:
    report = RunReport("hang", "2026-01-01T00:00:00+00:00", "2026-01-01T00:01:00+00:00",
                       ("harness", "run"), "cpu", {}, cases=(hang_case(),))  # fmt: skip
    page, watch = open_page(browser, write_run_html(report, tmp_path))
    hang = page.locator("table.hang")  # the failed case is open, its diagnosis unfolded
    assert hang.locator("tbody tr").count() == 2
    rank1 = hang.locator("tbody tr").nth(1)
    assert rank1.locator("td").nth(1).inner_text() == "1"
    assert rank1.locator("td").nth(4).inner_text() == "rank 1: tile 3 | decode <b> (1.2 s ago)"
    assert rank1.locator("td").nth(5).inner_text() == "decode_tile (serve.py:41)"
    rank1.locator("summary", has_text="py-spy --native").click()
    stack = rank1.locator("pre").inner_text()
    assert "decode_tile (serve.py:41)" in stack and "<script>alert(5)</script>" in stack
    title = page.locator("details > summary", has_text="hang diagnosis, attempt #0")
    assert "readiness timeout, 2 process(es)" in title.inner_text()
    assert page.locator("pre.device").inner_text() == "device: not available here"
    screenshot(page, tmp_path, "hang-report.png")
    watch.assert_clean()  # nothing ran but the page's own script (CSP), no alert
