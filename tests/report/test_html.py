"""index.html of a real run and of a real comparison, read as files: self-contained, its
images written and decodable, every string from a case escaped."""

from __future__ import annotations

import json
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
    """Every start tag with its attributes, the text of every <script> that runs, and of every
    data block (``<script type="application/json">``)."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[str] = []
        self.data: list[str] = []
        self._into: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._into = None
        if tag == "script":
            self._into = (
                self.data if dict(attrs).get("type") == "application/json" else self.scripts
            )
            self._into.append("")

    def handle_endtag(self, tag: str) -> None:
        self._into = None

    def handle_data(self, data: str) -> None:
        if self._into is not None:
            self._into[-1] += data


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
    # 3 frames x (reference, output) on a run, whose output is its reference ("identical", no
    # heat map); x (reference, base, head, |head - base|) on the comparison (head nudged)
    assert len(srcs) >= (12 if which == "comparison" else 6), srcs
    for ref in [*srcs, *hrefs]:
        assert ref is not None
        assert not re.match(r"[a-z]+:", ref), f"{ref}: the page must load nothing from elsewhere"
        if not ref.startswith("#"):
            target = folder / ref
            assert target.is_file() and target.resolve().is_relative_to(folder.resolve()), ref
            assert media.read_png(target).size > 0
    assert not [t for t, a in tags.tags if t in ("link", "iframe", "object", "embed")]
    assert not [a for t, a in tags.tags if t == "script" and a.get("src")]
    assert len(tags.scripts) == 1, "one inline script: filter, sort, draw a case when opened"
    assert len(tags.data) == (1 if which != "comparison" else 0), "a run page's case data"
    for block in tags.data:
        assert "<" not in block and json.loads(block)["cases"]


def test_injection_case_is_escaped_everywhere(reports: Reports) -> None:
    text = (reports.run / "index.html").read_text("utf-8")
    tags = parse(reports.run / "index.html")
    assert len(tags.scripts) == 1 and "alert" not in tags.scripts[0]
    (data,) = tags.data  # the case's strings are data, drawn as text by the page's script
    assert INJECTION in json.loads(data)["strings"] and "<" not in data
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


def test_a_one_step_difference_is_drawn_at_full_scale_with_its_scale(reports: Reports) -> None:
    # head's frames differ from base's by 1/255 in their top rows (reportruns.nudge_video)
    text = (reports.comparison / "index.html").read_text("utf-8")
    diffs = re.findall(r'<a href="(images/[^"]+)"><img[^>]+alt="\|head - base\| frame', text)
    assert len(diffs) == 3
    for d in diffs:
        rgb = media.read_png(reports.comparison / d)
        assert (rgb[:4] == [252, 255, 164]).all() and rgb[4:].max() == 0
    assert text.count("<span>0.0039 (1/255)</span>") == 3
    assert text.count('class="heatbar"') == 3


def test_identical_frames_say_identical_and_have_no_heat_map(reports: Reports) -> None:
    # the run's output is its reference, frame for frame, on the frames shown
    text = (reports.run / "index.html").read_text("utf-8")
    assert '<span class="identical">identical</span><figcaption>|output - reference|' in text
    assert 'alt="|output - reference| frame' not in text


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
