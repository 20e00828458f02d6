"""`harness init`'s templates and names, in process (the end-to-end run is tests/e2e/test_init.py):
what it writes loads through the real case loader and profile loader, every template ships as
package data, and names that cannot become a module are refused."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from harness.cases import load_suite
from harness.cli import main
from harness.cli.init import TEMPLATES, render, stack_name
from harness.platforms.profile import load_profile

REPO = Path(__file__).resolve().parents[2]
SCAFFOLD = REPO / "harness" / "cli" / "scaffold"


def test_scaffold_loads_through_the_real_loaders(tmp_path: Path) -> None:
    files = render("wan22")
    for rel, text in files.items():
        assert "${" not in text, rel
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    suite = load_suite([tmp_path / "cases"])
    assert suite.errors == ()
    cases = {c.id: c for c in suite.cases}
    assert {c: cases[c].kind for c in cases} == {
        "wan22-load-exact": "loader",
        "wan22-t2v": "pipeline",
        "wan22-quant-dispatch": "quant",
    }
    assert {c.target for c in suite.cases} == {
        "wan22_scenarios:load_exact",
        "wan22_scenarios:quant_dispatch",
        "wan22_scenarios:t2v",
    }
    assert all(c.code_root == "." for c in suite.cases)
    assert cases["wan22-t2v"].reference == "wan22-t2v"
    profile = load_profile(tmp_path / "runners" / "cpu.toml")
    assert (profile.name, profile.platform, profile.device_count) == ("cpu", "cpu", 0)
    compile(files["wan22_scenarios.py"], "wan22_scenarios.py", "exec")


def test_every_template_is_used_and_shipped_as_package_data() -> None:
    on_disk = sorted(str(p.relative_to(SCAFFOLD)) for p in SCAFFOLD.rglob("*") if p.is_file())
    assert on_disk == sorted(t for t, _ in TEMPLATES)
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    globs = pyproject["tool"]["setuptools"]["package-data"]["harness"]
    shipped = {
        str(p.relative_to(REPO / "harness")) for g in globs for p in (REPO / "harness").glob(g)
    }
    assert {f"cli/scaffold/{t}" for t in on_disk} <= shipped


@pytest.mark.parametrize(
    ("folder", "name"),
    [
        ("mystack", "mystack"),
        ("My-Stack 2", "my_stack_2"),
        ("2fast", "mystack"),
        ("class", "mystack"),
    ],
)
def test_stack_name_from_the_folder(tmp_path: Path, folder: str, name: str) -> None:
    assert stack_name(tmp_path / folder) == name


@pytest.mark.parametrize("bad", ["My-Stack", "2fast", "class", "x" * 41])
def test_a_name_that_cannot_be_a_module_is_refused(
    tmp_path: Path, bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["init", str(tmp_path / "s"), "--name", bad]) == 2
    assert f"error: --name {bad!r}: expected lowercase letters" in capsys.readouterr().err
    assert not (tmp_path / "s").exists() or not any((tmp_path / "s").iterdir())
