"""Which file a server's command runs, resolved as its interpreter would (code provenance of a
server without a perf log): ``-m`` from the working folder, then PYTHONPATH; a script relative to
the working folder; nothing claimed for a console script, ``-c`` or a module found nowhere."""

from __future__ import annotations

import sys
from pathlib import Path

from harness.worker.command_file import command_file


def tree(root: Path) -> tuple[Path, Path]:
    """A checkout with ``pkg/serve.py`` and a package ``app`` (its ``__main__``), and a code
    root ``src`` holding another ``pkg``."""
    for folder in (root / "co" / "pkg", root / "co" / "app", root / "co" / "src" / "pkg"):
        folder.mkdir(parents=True)
        (folder / "__init__.py").write_text("")
    (root / "co" / "pkg" / "serve.py").write_text("")
    (root / "co" / "src" / "pkg" / "serve.py").write_text("")
    (root / "co" / "app" / "__main__.py").write_text("")
    (root / "co" / "run.py").write_text("")
    return root / "co", root / "co" / "src"


def test_a_module_comes_from_the_working_folder_first_then_pythonpath(tmp_path: Path) -> None:
    co, src = tree(tmp_path)
    env = {"PYTHONPATH": str(src)}
    argv = ["python3", "-u", "-X", "dev", "-m", "pkg.serve", "--port", "1"]
    assert command_file(argv, env, str(co)) == str(co / "pkg" / "serve.py")
    # -P (or PYTHONSAFEPATH) keeps the working folder off the path: PYTHONPATH's copy runs
    assert command_file(["python3", "-P", "-m", "pkg.serve"], env, str(co)) == str(
        src / "pkg" / "serve.py"
    )
    safe = {**env, "PYTHONSAFEPATH": "1"}
    assert command_file(["python3", "-mpkg.serve"], safe, str(co)) == str(src / "pkg" / "serve.py")
    assert command_file(["python3", "-m", "app"], {}, str(co)) == str(co / "app" / "__main__.py")


def test_a_script_is_relative_to_the_working_folder(tmp_path: Path) -> None:
    co, _ = tree(tmp_path)
    assert command_file([sys.executable, "run.py", "8000"], {}, str(co)) == str(co / "run.py")


def test_nothing_is_claimed_that_the_interpreter_might_not_do(tmp_path: Path) -> None:
    co, _ = tree(tmp_path)
    assert command_file(["sglang", "serve", "--port", "1"], {}, str(co)) is None
    assert command_file(["python3", "-c", "import pkg.serve"], {}, str(co)) is None
    assert command_file(["python3", "-m", "nowhere.serve"], {}, str(co)) is None
    assert command_file(["python3", "-I", "-P", "-m", "pkg.serve"], {}, str(co)) is None
