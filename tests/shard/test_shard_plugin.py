"""``pytest harness/ --harness-fail-fast``: the first failing case stops the batch; the cases it
did not start are skipped in pytest with the reason and listed as missing in report.json."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import harness
from harness.report.io import read_report

pytestmark = pytest.mark.slow

PKG = str(Path(harness.__file__).resolve().parent)

TARGETS = """
def ok():
    pass

def bad():
    raise AssertionError("wrong on purpose")
"""

CASES = """
[[case]]
id = "a-bad"
kind = "loader"
target = "tmod:bad"

[[case]]
id = "b-ok"
kind = "loader"
target = "tmod:ok"

[[case]]
id = "c-ok"
kind = "loader"
target = "tmod:ok"
"""


def test_plugin_fail_fast_skips_the_rest_with_the_reason(tmp_path: Path) -> None:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "tmod.py").write_text(TARGETS)
    (tmp_path / "cases").mkdir()
    (tmp_path / "cases" / "loader.toml").write_text(CASES)
    proc = subprocess.run(
        [
            sys.executable, "-m", "pytest", PKG, "-p", "no:cacheprovider", "-p", "no:xdist",
            f"--rootdir={tmp_path}", "--harness-cases", "cases", "--harness-code-root", "code",
            "--harness-out", "reports", "--harness-fail-fast", "-rs",
        ],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout
    reason = "not run: stopped after loader/a-bad[cpu] failed (--fail-fast)"
    assert "1 failed, 2 skipped" in proc.stdout
    # -rs groups equal skips: one line for both cases not run.
    assert re.search(r"SKIPPED \[2\] \S*loader\.toml\S* " + re.escape(reason), proc.stdout)
    (run,) = [d for d in (tmp_path / "reports").iterdir() if d.name != "latest"]
    report = read_report(run)
    assert [(c.id, c.status) for c in report.cases] == [("a-bad", "failed")]
    assert [(m.id, m.reason) for m in report.missing] == [("b-ok", reason), ("c-ok", reason)]
    assert report.shard is None  # not sharded: nothing claims a shard
