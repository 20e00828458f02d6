"""Leak 12: an eager ``import torch`` in ``tinyav.quant`` is caught by the cold-import case.

The case runs ``tinyav.scenarios.imports:cold_import`` in a fresh interpreter. Here it runs in a
bare ``python -c`` against a copy of the tinyav package: the clean copy passes, a copy with an
``import torch`` planted in ``tinyav/quant/__init__.py`` fails, and an interpreter that already
imported torch is refused as an error (it could not tell either way), never passed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cases import load_file
from harness.model import Case

ROOT = Path(__file__).resolve().parents[2]
TARGET = ROOT / "targets" / "tinyav"
CASE_FILE = ROOT / "cases" / "quant" / "cold_import.toml"


@pytest.fixture(scope="module")
def case() -> Case:
    """The cold-import case that asserts ``import tinyav.quant`` leaves torch out."""
    (found,) = [
        c
        for c in load_file(CASE_FILE)
        if c.params.get("module") == "tinyav.quant" and "torch" in c.params.get("absent", ())
    ]
    assert found.fresh_process and found.kind == "import"
    assert found.target == "tinyav.scenarios.imports:cold_import"
    return found


def _copy(tmp_path: Path, *, plant: bool) -> Path:
    root = tmp_path / ("planted" if plant else "clean")
    shutil.copytree(
        TARGET / "tinyav", root / "tinyav", ignore=shutil.ignore_patterns("__pycache__")
    )
    if plant:
        init = root / "tinyav" / "quant" / "__init__.py"
        src = init.read_text()
        needle = "import importlib\n"
        assert needle in src
        init.write_text(src.replace(needle, needle + "import torch  # planted eager import\n", 1))
    return root


def _run(case: Case, code_root: Path, *, preimport: str = "") -> subprocess.CompletedProcess[str]:
    module, fn = (case.target or "").split(":")
    code = "\n".join(
        [
            "import importlib, json, sys",
            preimport,
            "import tinyav",
            f"assert tinyav.__file__.startswith({str(code_root)!r}), tinyav.__file__",
            f"params = json.loads({json.dumps(json.dumps(dict(case.params)))})",
            f"getattr(importlib.import_module({module!r}), {fn!r})(**params)",
            "print('passed')",
        ]
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(code_root), str(ROOT)])}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )


def test_clean_copy_passes(case: Case, tmp_path: Path) -> None:
    proc = _run(case, _copy(tmp_path, plant=False))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().endswith("passed")


def test_planted_eager_torch_import_fails(case: Case, tmp_path: Path) -> None:
    proc = _run(case, _copy(tmp_path, plant=True))
    assert proc.returncode != 0
    assert "AssertionError: import tinyav.quant also imported ['torch']" in proc.stderr


def test_interpreter_that_preimported_torch_is_an_error_not_a_pass(
    case: Case, tmp_path: Path
) -> None:
    # What today's harness workers do (they pre-import numpy and torch at start-up).
    proc = _run(case, _copy(tmp_path, plant=False), preimport="import torch")
    assert proc.returncode != 0
    assert "RuntimeError: ['torch'] already imported before import tinyav.quant" in proc.stderr
    assert "AssertionError" not in proc.stderr
