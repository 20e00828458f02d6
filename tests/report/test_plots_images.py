"""The report's pictures and plots, unit by unit: heat maps, thumbnails, the gallery of a case
whose output file is broken, strip plots in time order, escaping of labels, worker log tails."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from harness import media
from harness.fsio import write_array
from harness.model import Attempt, CaseResult, ErrorInfo
from harness.report import images, plots
from harness.report.gallery import run_gallery
from harness.report.html import Logs, first_line
from harness.report.images import ImageFolder


def test_heat_map_is_scaled_to_the_largest_difference_of_its_frame() -> None:
    a = np.full((8, 8, 3), 100, np.uint8)
    b = a.copy()
    b[2, 3] = 101  # a 1/255 difference: full scale, not a black square
    h = images.heat(a, b)
    assert h.max == 1 and 0 < h.mean < 1
    assert h.rgb is not None
    assert h.rgb[2, 3].tolist() == [252, 255, 164]  # the top of the colour scale
    h.rgb[2, 3] = 0
    assert h.rgb.max() == 0  # the rest agrees: black
    assert h.scale == "0 .. 0.0039 (1/255)"
    half = images.heat(a, np.full_like(a, 228))  # 128/255 everywhere
    assert half.rgb is not None and (half.rgb == [252, 255, 164]).all()
    assert half.scale == "0 .. 0.5 (128/255)"


def test_identical_frames_have_no_heat_map() -> None:
    a = np.full((8, 8, 3), 7, np.uint8)
    h = images.heat(a, a.copy())
    assert h.rgb is None and h.max == 0 and h.scale == "identical"


def test_the_colour_bar_of_the_page_is_the_heat_map_scale() -> None:
    css = (Path(images.__file__).parent / "templates" / "report.css").read_text()
    stops = ",".join("#{:02x}{:02x}{:02x}".format(*map(int, s)) for s in images.STOPS)
    assert f"linear-gradient(90deg,{stops})" in css


def test_large_frames_get_a_thumbnail_linked_to_the_full_size(tmp_path: Path) -> None:
    frame = np.random.default_rng(0).integers(0, 255, (480, 640, 3), dtype=np.uint8)
    pic = ImageFolder(tmp_path).write("case/video/output/0", frame)
    assert pic.src != pic.thumb
    assert media.read_png(tmp_path / pic.src).shape == (480, 640, 3)
    assert max(media.read_png(tmp_path / pic.thumb).shape[:2]) <= images.THUMB_PX
    small = ImageFolder(tmp_path).write("case/video/output/1", frame[:64, :64])
    assert small.src == small.thumb


def test_a_broken_output_is_named_in_the_gallery_not_raised(tmp_path: Path) -> None:
    (tmp_path / "video.safetensors").write_bytes(b"not safetensors")
    write_array(tmp_path / "audio.safetensors", np.zeros(1600, np.float32))
    a = Attempt(
        "c", "cpu", 0, "passed", 1,
        outputs={
            "video": {"kind": "video", "path": "video.safetensors", "shape": [4, 8, 8, 3]},
            "audio": {"kind": "audio", "path": "audio.safetensors",
                      "meta": {"sample_rate": 16000}},
        },
    )  # fmt: skip
    g = run_gallery(CaseResult("c", "pipeline", "cpu", "passed", attempts=(a,)), tmp_path,
                    None, ImageFolder(tmp_path), "c0")  # fmt: skip
    assert g is not None
    (video,) = g.videos
    assert any("video.safetensors" in p for p in video.problems)
    assert all(cell.picture is None for col in video.columns for cell in col.cells)
    (audio,) = g.audios
    assert len(audio.waves) == 1 and "1600 samples" in audio.waves[0]


def test_strip_plot_puts_rounds_in_time_order_and_escapes_its_title() -> None:
    pts = [
        plots.Point("head", 2, "t5", 3.0),
        plots.Point("base", 1, "t1", 1.0),
        plots.Point("head", 1, "t2", 2.0),
        plots.Point("base", 2, "t4", 4.0),
    ]
    svg = plots.strip_plot("<b>stage</b>", pts)
    assert "<b>" not in svg and "&lt;b&gt;stage&lt;/b&gt;" in svg
    assert svg.count("<circle") == 4
    # round 1 sits left of round 2, and one grey pairing line per round
    xs = [float(s.split('"')[0]) for s in svg.split('cx="')[1:]]
    titles = [s.split("</title>")[0] for s in svg.split("<title>")[2:]]
    by_round = {t: x for t, x in zip(titles, xs, strict=True)}
    assert by_round["base round 1: 1 s"] < by_round["base round 2: 4 s"]
    assert by_round["head round 1: 2 s"] < by_round["head round 2: 3 s"]
    assert svg.count('stroke="#d1d5db"') == 2


def test_waveform_label_is_escaped() -> None:
    svg = plots.waveform(np.zeros(100), 10, label="<script>x</script>", colour="#000")
    assert "<script>" not in svg and "&lt;script&gt;" in svg


def test_logs_of_an_attempt_are_found_by_file_name_after_the_run_moved(tmp_path: Path) -> None:
    (tmp_path / "workers").mkdir()
    (tmp_path / "workers" / "head-cpu-002.log").write_text("x" * 5000 + "last line\n")
    (tmp_path / "workers" / "head-cpu-002.stacks").write_text("Thread 0x1 (most recent call)\n")
    err = ErrorInfo.make("WorkerCrashed", "signal 9; log: /gone/workers/head-cpu-002.log")
    logs = Logs(tmp_path).for_attempt(Attempt("c", "cpu", 0, "crashed", 1, error=err))
    assert [n for n, _ in logs] == ["head-cpu-002.log", "head-cpu-002.stacks"]
    assert logs[0][1].endswith("last line\n") and len(logs[0][1]) == 4000


def test_frame_plot_has_axes_the_threshold_and_the_worst_frame() -> None:
    svg = plots.frame_line("<i>psnr</i>", [0, 1, 2, 3], [89.0, 68.0, float("inf"), 80.0], 40.0)
    assert 'width="480" height="200"' in svg
    assert "<i>" not in svg and "&lt;i&gt;psnr" in svg
    assert 'class="threshold"' in svg and "threshold &gt;= 40" in svg
    assert "worst: frame 1, 68" in svg  # the lowest value of a >= check
    assert ">80<" in svg and ">40<" in svg  # value-axis tick labels
    assert ">0<" in svg and ">3<" in svg  # frame-axis tick labels
    assert "inf drawn at the top" in svg
    mae = plots.frame_line("mae", [0, 1, 2], [0.1, 0.5, 0.2], 1.0, "<=")
    assert "worst: frame 1, 0.5" in mae  # the highest value of a <= check
    flat = plots.frame_line("ssim", [0, 1, 2], [1.0, 1.0, 1.0], 0.98)
    assert "worst" not in flat  # every frame alike: none is marked


def test_a_table_cell_shows_one_line_of_a_text() -> None:
    assert first_line("Traceback (most recent call last):\n  File x") == (
        "Traceback (most recent call last): ..."
    )
    assert first_line("x" * 500) == "x" * 160 + " ..."
    assert first_line("short") == "short"
