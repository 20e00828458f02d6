"""`harness report DIR` re-renders from the JSON, detecting a run, a merged run or a
comparison from the files present, and never rewrites the JSON."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from reportruns import Reports, harness

from harness.model import CaseResult
from harness.report.io import read_report

# the runs and comparison of the `reports` fixture: built once, on one xdist worker
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("reports")]

RUN_FILES = ("index.html", "summary.md", "junit.xml")


def test_report_rerenders_a_run(reports: Reports, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(reports.base, run)
    source = (run / "report.json").read_bytes()
    for name in RUN_FILES:
        (run / name).unlink()
    shutil.rmtree(run / "images")
    proc = harness("report", run)
    assert proc.returncode == 0, proc.stderr
    assert all((run / n).is_file() for n in RUN_FILES)
    assert len(list((run / "images").glob("*.png"))) >= 6  # 3 frames x (reference, output)
    assert (run / "report.json").read_bytes() == source


def test_report_rerenders_a_merged_run_given_its_json_file(
    reports: Reports, tmp_path: Path
) -> None:
    # a merged run is a report.json like any other: the cases of several shards, their
    # outputs in the shards' folders (absolute paths here)
    shard = read_report(reports.base)
    real = [
        replace(
            c,
            attempts=tuple(
                replace(
                    a,
                    outputs={
                        k: {**v, "path": str(reports.base / v["path"])}
                        for k, v in a.outputs.items()
                    },
                )
                for a in c.attempts
            ),
        )
        for c in shard.cases
    ]
    other = [CaseResult(f"c{i}", "quant", p, "passed") for i, p in enumerate(("cpu", "cuda"))]
    merged = replace(shard, run_id="merged", cases=(*real, *other))
    (tmp_path / "report.json").write_text(json.dumps(merged.to_json()))
    proc = harness("report", tmp_path / "report.json")
    assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "index.html").read_text()
    assert "quant/c1[cuda]" in page and 'data-platform="cuda"' in page
    # 3 frames x (reference, output); the output is its reference: "identical", no heat map
    assert "pipeline/t2va-int8[cpu]" in page and len(list((tmp_path / "images").iterdir())) >= 6
    assert "quant/c1[cuda]" in (tmp_path / "summary.md").read_text()
    assert "c1" in (tmp_path / "junit.xml").read_text()


def test_report_rerenders_a_comparison(reports: Reports, tmp_path: Path) -> None:
    cmp = tmp_path / "cmp"
    shutil.copytree(reports.comparison, cmp)
    source = (cmp / "comparison.json").read_bytes()
    (cmp / "index.html").unlink()
    (cmp / "summary.md").unlink()
    proc = harness("report", cmp)
    assert proc.returncode == 0, proc.stderr
    assert "strip" in (cmp / "index.html").read_text()
    assert "A B B A interleaved" in (cmp / "summary.md").read_text()
    assert (cmp / "comparison.json").read_bytes() == source
    assert "re-rendered" in proc.stderr and "index.html, summary.md" in proc.stderr


def test_report_of_a_folder_without_json_is_a_usage_error(tmp_path: Path) -> None:
    proc = harness("report", tmp_path)
    assert proc.returncode == 2
    assert "neither report.json" in proc.stderr and str(tmp_path) in proc.stderr


def test_report_of_a_bad_comparison_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "comparison.json").write_text('{"schema_version": 99}')
    proc = harness("report", tmp_path)
    assert proc.returncode == 2
    assert "comparison.json" in proc.stderr and "schema_version 99" in proc.stderr
