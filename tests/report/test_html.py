"""index.html of a real run and of a real comparison, read as files: self-contained, its
images written and decodable, every string from a case escaped."""

from __future__ import annotations

import re
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path

import pytest
from reportruns import INJECTION, Reports

from harness import media
from harness.model import CaseComparison, Divergence, FailureMatrix
from harness.report.comparison_io import read_comparison
from harness.report.html_compare import divergence_words, render_comparison_html

# the runs and comparison of the `reports` fixture: built once, on one xdist worker
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("reports")]


class Tags(HTMLParser):
    """Every start tag with its attributes, and the text of every <script>."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"
        if tag == "script":
            self.scripts.append("")

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.scripts[-1] += data


def parse(path: Path) -> Tags:
    t = Tags()
    t.feed(path.read_text("utf-8"))
    return t


@pytest.mark.parametrize("which", ["run", "comparison", "base"])
def test_page_is_self_contained_and_its_images_exist(reports: Reports, which: str) -> None:
    folder = getattr(reports, which)
    tags = parse(folder / "index.html")
    srcs = [a["src"] for t, a in tags.tags if t == "img"]
    hrefs = [a["href"] for t, a in tags.tags if t == "a" and a.get("href")]
    assert len(srcs) >= 9, "3 frames x (reference, output|base, diff|head) at least"
    for ref in [*srcs, *hrefs]:
        assert ref is not None
        assert not re.match(r"[a-z]+:", ref), f"{ref}: the page must load nothing from elsewhere"
        if not ref.startswith("#"):
            target = folder / ref
            assert target.is_file() and target.resolve().is_relative_to(folder.resolve()), ref
            assert media.read_png(target).size > 0
    assert not [t for t, a in tags.tags if t in ("link", "iframe", "object", "embed")]
    assert not [a for t, a in tags.tags if t == "script" and a.get("src")]
    assert len(tags.scripts) == 1, "one inline script: the table's filter and sort"


def test_injection_case_is_escaped_everywhere(reports: Reports) -> None:
    text = (reports.run / "index.html").read_text("utf-8")
    tags = parse(reports.run / "index.html")
    assert len(tags.scripts) == 1 and "alert" not in tags.scripts[0]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    for raw in (INJECTION, "<img src=x", "<b onmouseover", "</pre><script>"):
        assert raw not in text, raw
    assert not [a for t, a in tags.tags if t == "img" and "onerror" in a]
    assert not [a for t, a in tags.tags if t == "b" and "onmouseover" in a]
    # the worker log the error names is shown (escaped) though the run folder moved
    assert "worker says &lt;script&gt;" in text


def test_run_page_shows_the_real_case(reports: Reports) -> None:
    text = (reports.run / "index.html").read_text("utf-8")
    for expected in (
        "pipeline/t2va-int8[cpu]",
        "ssim(video)",
        "DenoisingStage",  # stage latencies
        "denoise.step00",  # fingerprints
        "checkpoint",  # inputs
        "|output - reference|",  # the heat map
        'class="plot wave"',  # the waveforms
        'data-set-filter="status=failed"',  # the summary bar counts the injection case
        "runner <b>cpu</b>",
    ):
        assert expected in text, expected


def test_heat_maps_of_identical_frames_are_black(reports: Reports) -> None:
    # two runs of one seeded case give the same frames: |head - base| is zero everywhere
    text = (reports.comparison / "index.html").read_text("utf-8")
    diffs = re.findall(r'<a href="(images/[^"]+)"><img[^>]+alt="\|head - base\| frame', text)
    assert diffs
    for d in diffs:
        assert media.read_png(reports.comparison / d).max() == 0


def test_comparison_page_has_strip_plots_and_the_divergence_in_words(reports: Reports) -> None:
    text = (reports.comparison / "index.html").read_text("utf-8")
    assert text.count('class="plot strip"') >= 3
    assert "No divergence: every input hash" in text
    assert "<figcaption>reference" in text and "<figcaption>base" in text
    assert "rounds in the order they ran" in text or "measured runs in order" in text


def test_comparison_page_names_a_side_report_it_cannot_read(
    reports: Reports, tmp_path: Path
) -> None:
    comparison = read_comparison(reports.comparison)
    gone = replace(comparison, base=replace(comparison.base, report=str(tmp_path / "gone")))
    page = render_comparison_html(gone, tmp_path)
    assert "base report:" in page and "gone" in page and "no such report" in page
    assert "base round" not in page  # base's rounds are not plotted: its attempts are gone


def test_divergence_in_words_names_the_tensor_the_step_and_the_size() -> None:
    c = CaseComparison(
        "t", "pipeline", "cpu", "regression", "no_change", "regression",
        FailureMatrix("no_change"),
        Divergence("stage", "denoise.step02", {"step": 2, "max_abs_diff_at_least": 0.25}),
    )  # fmt: skip
    words = divergence_words(c)
    assert "first differ at 'denoise.step02' at step 2" in words and "at least 0.25" in words
    nan = replace(c, divergence=Divergence("nonfinite", "vae.out", {"side": "head"}))
    assert "holds NaN/Inf on head" in divergence_words(nan)
