"""The report templates' compiled code, kept where Python keeps a module's bytecode
(harness.report.template_cache): a later process reads it instead of compiling, a changed
template or a damaged file is compiled again, and nothing is written where Python would not
write bytecode."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jinja2
import pytest

from harness.report.template_cache import CompiledTemplates

PAGE = '{% extends "base.j2" %}{% block body %}<p>{{ name }}</p>{% endblock %}'
BASE = "<html>{% block body %}{% endblock %}</html>"


class Counting(jinja2.Environment):
    """Counts the templates it compiles from their text."""

    compiled: list[str]

    def compile(self, source: Any, name: Any = None, *args: Any, **kwargs: Any) -> Any:
        self.compiled.append(name)
        return super().compile(source, name, *args, **kwargs)


def render(folder: Path) -> tuple[str, list[str]]:
    """``page.j2`` rendered in an environment as a new process has it: a cache with nothing
    in memory."""
    env = Counting(
        loader=jinja2.FileSystemLoader(folder), autoescape=True, bytecode_cache=CompiledTemplates()
    )
    env.compiled = []
    return env.get_template("page.j2").render(name="<x>"), env.compiled


@pytest.fixture
def templates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Two templates, whose code is cached beside them (whatever PYTHONPYCACHEPREFIX this
    session has, as `.ci/run` sets one)."""
    monkeypatch.setattr(sys, "pycache_prefix", None)
    folder = tmp_path / "templates"
    folder.mkdir()
    (folder / "page.j2").write_text(PAGE)
    (folder / "base.j2").write_text(BASE)
    return folder


def cached(template: Path) -> Path:
    return Path(importlib.util.cache_from_source(str(template), optimization="template"))


def test_a_later_environment_reads_the_code_instead_of_compiling(
    templates: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    first, compiled = render(templates)
    assert compiled == ["page.j2", "base.j2"]
    assert cached(templates / "page.j2").is_file() and cached(templates / "base.j2").is_file()
    assert cached(templates / "page.j2").parent == templates / "__pycache__"
    again, compiled = render(templates)
    assert compiled == [] and again == first == "<html><p>&lt;x&gt;</p></html>"


def test_a_changed_template_is_compiled_again(
    templates: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    render(templates)
    (templates / "page.j2").write_text(PAGE.replace("<p>", "<b>").replace("</p>", "</b>"))
    page, compiled = render(templates)
    assert compiled == ["page.j2"] and "<b>&lt;x&gt;</b>" in page
    assert render(templates)[1] == []  # and the new code was kept


def test_a_damaged_or_foreign_file_is_compiled_again(
    templates: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    first, _ = render(templates)
    path = cached(templates / "page.j2")
    good = path.read_bytes()
    for damaged in (good[: len(good) // 2], b"\0" * 64, good.replace(b"harness-template", b"x")):
        path.write_bytes(damaged)
        page, compiled = render(templates)
        assert compiled == ["page.j2"] and page == first
        assert path.read_bytes() == good


def test_nothing_is_written_where_python_writes_no_bytecode(
    templates: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    render(templates)
    assert not (templates / "__pycache__").exists()
    assert render(templates)[1] == ["page.j2", "base.j2"]


def test_a_cache_folder_it_cannot_write_leaves_it_compiling(
    templates: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where ``__pycache__`` cannot be made (here a file by that name, which stops root too)."""
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    (templates / "__pycache__").write_text("")
    for _ in range(2):
        page, compiled = render(templates)
        assert compiled == ["page.j2", "base.j2"] and "&lt;x&gt;" in page


def test_the_report_s_templates_are_kept_under_pythonpycacheprefix(tmp_path: Path) -> None:
    """The harness's own environment, in a process of its own, as `.ci/run` sets it up."""
    prefix = tmp_path / "bytecode"
    env = {**os.environ, "PYTHONPYCACHEPREFIX": str(prefix)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    code = "from harness.report.html import environment; environment().get_template('run.j2')"
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=120)
    import harness.report

    template = Path(harness.report.__file__).resolve().parent / "templates" / "run.j2"
    mirrored = prefix / template.parent.relative_to(template.anchor)
    assert sorted(p.name for p in mirrored.glob("run.*.pyc")) == [
        f"run.{sys.implementation.cache_tag}.opt-template.pyc"
    ]
