"""Every command and TOML snippet of README.md and docs/*.md is executed, so the docs cannot
drift from the code: see docsnippets.py for the block tags. Cheap harness commands run for real
in a scratch copy of the repository (one per page), heavy ones through the real parser."""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from docsnippets import (
    COMMAND_LANGS,
    PROSE_LANGS,
    RUNNABLE,
    TOML_KINDS,
    Block,
    CommandLine,
    blocks,
    command_lines,
    flags,
    harness_argv,
    inline_harness_commands,
    pytest_argv,
    quote,
    toml_data,
)

import harness
from harness.cases import load_file
from harness.cli import build_parser
from harness.cli.tree import CommandLineError, check_command_line, commands
from harness.errors import HarnessError
from harness.platforms.profile import load_profile

REPO = Path(harness.__file__).resolve().parent.parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# what a scratch copy of the repository needs for the commands that run for real
SCRATCH = ("cases", "runners", "references", "targets")
# the commands run for real never write to a CI job's summary or annotations
SCRATCH_ENV = {
    **{k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")},
    "PYTHONPATH": str(REPO),
}
# tools the dev extra installs (CI runs them); shell built-ins and git
TOOLS = ("ruff", "mypy", "lint-imports", "git", "cd", ".", "source", "export", "open")
# pytest's own command-line parsing, with this repository's plugins, and nothing run
PYTEST_PARSE = "import sys; from _pytest.config import _prepareconfig; _prepareconfig(sys.argv[1:])"


@functools.cache
def pytest_help() -> str:
    """`pytest --help` as CI's pytest shows it, with this repository's plugins."""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--help", "-p", "no:cacheprovider"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    return proc.stdout


def check_parse(block: Block, cl: CommandLine) -> None:
    """One command line checked without running it; AssertionError naming what is wrong."""
    at = f"{block.path.name}:{cl.line}"
    for argv in cl.argvs:
        if (h := harness_argv(argv)) is not None:
            try:
                check_command_line(build_parser(), h)
            except CommandLineError as exc:
                raise AssertionError(f"{at}: {exc}") from None
        elif (p := pytest_argv(argv)) is not None:
            known = set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", pytest_help()))
            bad = [f for f in flags(p) if f not in known]
            if bad:  # not in --help (an alias such as --junitxml): pytest's own parser decides
                proc = subprocess.run(
                    [sys.executable, "-c", PYTEST_PARSE, *p, "-p", "no:cacheprovider"],
                    cwd=REPO,
                    capture_output=True,
                    text=True,
                    check=False,
                )
                why = [x for x in proc.stderr.splitlines() if "error:" in x] or [proc.stderr]
                assert proc.returncode == 0, f"{at}: pytest has no option {bad}: {why[0]}"
            for arg in p:  # the test paths it collects
                if arg.startswith(("tests/", "harness/")) and not (REPO / arg).exists():
                    raise AssertionError(f"{at}: pytest {arg}: no such path in the repository")
        elif argv[0] in ("python", "python3") and len(argv) > 1 and argv[1].endswith(".py"):
            script = REPO / argv[1]
            assert script.is_file(), f"{at}: no script {argv[1]}"
            source = script.read_text(encoding="utf-8")
            bad = [f for f in flags(argv[2:]) if f not in source]
            assert not bad, f"{at}: {argv[1]} has no option {bad}"
        elif argv[0] == "pip" or argv[:3] == ["python", "-m", "pip"] or argv[:2] == ["uv", "pip"]:
            check_pip(at, argv)
        elif argv[:3] in (["python3", "-m", "venv"], ["python", "-m", "venv"]):
            pass
        else:
            assert argv[0] in TOOLS, (
                f"{at}: the docs test does not know how to check `{argv[0]}` "
                f"({quote(argv)}); teach tests/docs/test_snippets.py or drop it"
            )


def check_pip(at: str, argv: list[str]) -> None:
    """`pip install -e '.[extras]'` names extras pyproject.toml has; a pinned torch is CI's."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = set(project["optional-dependencies"])
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    installs = [
        line.split() for line in ci.splitlines() if re.search(r"pip (install|download) ", line)
    ]
    for arg in argv:
        if m := re.fullmatch(r"\.\[([\w,-]+)\]", arg):
            bad = set(m.group(1).split(",")) - extras
            assert not bad, f"{at}: pyproject.toml has no extra {sorted(bad)}"
        elif arg.startswith("torch=="):
            assert any(arg in words for words in installs), (
                f"{at}: {arg} is not the torch .ci/run installs"
            )


def runnable(argv: list[str], in_repo: bool) -> bool:
    """Cheap enough for the docs test: ``in_repo`` is False after a ``cd`` into a folder the
    block made (a `harness init` scaffold), whose whole suite is three small cases."""
    h = harness_argv(argv)
    if h is None:
        return argv[0] == "cd"
    if h in (["--version"], ["--help"]):
        return True
    if h[:1] == ["run"]:
        return "-k" in h or not in_repo  # one small case, never the bundled suite
    return any(tuple(h[: len(r)]) == r for r in RUNNABLE)


def run_for_real(block: Block, cl: CommandLine, cwd: Path, scratch: Path) -> Path:
    """Run a command line in the scratch copy; the folder the next one runs in."""
    at = f"{block.path.name}:{cl.line}"
    check_parse(block, cl)
    for argv in cl.argvs:
        assert runnable(argv, cwd == scratch), (
            f"{at}: `{quote(argv)}` is too heavy to run in the docs test; tag the block "
            "`parse-only: <why>`"
        )
    for argv in cl.argvs:
        if argv[0] == "cd":
            cwd = cwd / argv[1]
            continue
        h = harness_argv(argv)
        assert h is not None
        proc = subprocess.run(
            [sys.executable, "-m", "harness.cli", *h],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
            env=SCRATCH_ENV,
        )
        assert proc.returncode == cl.exit_code, (
            f"{at}: `{quote(argv)}` exited {proc.returncode}, the docs say {cl.exit_code}\n"
            f"{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
        )
    return cwd


def check_toml(block: Block, tmp: Path) -> None:
    assert block.mode in TOML_KINDS, (
        f"{block.where}: tag the toml block with its kind ({', '.join(TOML_KINDS)}), e.g. "
        "```toml case"
    )
    data = toml_data(block)
    if block.mode == "pyproject":
        return
    name = str(data.get("name", "snippet")) if block.mode == "profile" else "snippet"
    path = tmp / f"{name}.toml"
    path.write_text(block.body, encoding="utf-8")
    try:
        if block.mode == "case":
            assert load_file(path), f"{block.where}: no case in the block"
        else:
            load_profile(path)
    except HarnessError as exc:
        raise AssertionError(f"{block.where}: {exc}") from None


def check_page(path: Path, tmp: Path) -> list[str]:
    """Check every block of one page; the reasons of the blocks skipped."""
    skipped = []
    scratch = tmp / "repo"
    for block in blocks(path):
        if block.lang in COMMAND_LANGS:
            lines = command_lines(block)
            assert lines, f"{block.where}: a command block without a command"
            if block.mode == "skip":
                assert block.reason, f"{block.where}: `skip:` needs a reason"
                skipped.append(f"{block.where}: {block.reason}")
            elif block.mode == "parse-only":
                assert block.reason, f"{block.where}: `parse-only:` needs a visible reason"
                for cl in lines:
                    check_parse(block, cl)
            else:
                assert not block.tag, f"{block.where}: unknown tag {block.tag!r}"
                if not scratch.exists():
                    for name in SCRATCH:
                        shutil.copytree(REPO / name, scratch / name, symlinks=True)
                cwd = scratch
                for cl in lines:
                    cwd = run_for_real(block, cl, cwd, scratch)
        elif block.lang == "toml":
            check_toml(block, tmp)
        elif block.lang == "python":
            compile(block.body, block.where, "exec")
        else:
            assert block.lang in PROSE_LANGS, f"{block.where}: unknown block language {block.lang}"
            bad = [x for x in block.body.splitlines() if re.match(r"(\$ )?harness [a-z]", x)]
            assert not bad, f"{block.where}: a command in a prose block: {bad[0]}"
    tree = {c.path: set(c.options) for c in commands(build_parser())}
    for line, span in inline_harness_commands(path):
        words = span.split()[1:]
        cmd: tuple[str, ...] = ()
        for w in words:
            if (*cmd, w) in tree:
                cmd = (*cmd, w)
            elif not w.startswith("-"):
                break
        named = re.findall(r"(?<![\w-])--?[A-Za-z][\w-]*", span)  # [--x N] too
        bad = [f for f in named if f not in tree[cmd] | tree[()]]
        assert not bad, f"{path.name}:{line}: `{span}`: {bad} not an option of harness {cmd}"
    return skipped


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_snippet_of_the_page_works(page: Path, tmp_path: Path) -> None:
    skipped = check_page(page, tmp_path)
    if skipped:
        pytest.skip("checked all but: " + "; ".join(skipped))


def test_readme_is_short_and_the_pages_exist() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 250
    for link in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (REPO / link).exists(), f"README.md links {link}, which does not exist"
    for page in PAGES[1:]:
        # relative links only: an address with a scheme (https://...) is not a file here
        for link in re.findall(r"\]\(([^)#:]+)[)#]", page.read_text(encoding="utf-8")):
            assert (page.parent / link).exists(), f"{page.name} links {link}: not there"


def test_the_readme_commands_are_ci_s() -> None:
    """The README's two commands are the ones .ci/run runs."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    command = "python -m pytest -n 3 --dist loadgroup -q --durations=20"
    assert command in readme and command in ci
    assert "harness run" in readme


def _page(tmp_path: Path, text: str) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    page = tmp_path / "page.md"
    page.write_text(text, encoding="utf-8")
    return page


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("```console parse-only: heavy\n$ harness run --no-such-flag\n```\n", "--no-such-flag"),
        ("```console parse-only: heavy\n$ harness compare --bas main\n```\n", "--bas is not"),
        ("```console parse-only: heavy\n$ harness runn\n```\n", "invalid choice"),
        ("```console parse-only: heavy\n$ python -m pytest --no-such-flag\n```\n", "pytest has"),
        ("```sh parse-only: heavy\npip install -e '.[nosuch]'\n```\n", "no extra"),
        ("```sh parse-only: heavy\npip install torch==2.12.0\n```\n", "is not the torch"),
        ("```sh parse-only: heavy\npython bench/bench_nosuch.py\n```\n", "no script"),
        ("```console parse-only:\n$ harness run\n```\n", "visible reason"),
        ("```console\n$ harness compare --base main\n```\n", "too heavy"),
        ("```console\n$ harness run\n```\n", "too heavy"),
        ("```toml\nid = 'x'\n```\n", "tag the toml block"),
        ("```toml case\nid = 'x'\nkind = 'loader'\ntarget = 'm:f'\nrepeat = 2\n```\n", "repeat"),
        ("```toml profile\nname = 'cpu'\nplatform = 'cpu'\nthreds = 1\n```\n", "threds"),
        ("<!-- snippet: profile -->\n```toml\nname = 'cpu'\nthreds = 1\n```\n", "threds"),
        ("<!-- snippet: parse-only: x -->\n```console\n$ harness plan --shardz 2\n```\n", "shardz"),
        ("```text\nharness run -k x\n```\n", "prose block"),
        ("Run `harness plan --shardz 4`.\n", "--shardz"),
        ("| `harness plan [PATHS] [--shardz N]` | split |\n", "--shardz"),
    ],
)
def test_a_bad_snippet_fails(tmp_path: Path, text: str, why: str) -> None:
    with pytest.raises(AssertionError, match=re.escape(why)):
        check_page(_page(tmp_path, text), tmp_path)


def test_a_good_snippet_passes_and_a_wrong_exit_code_fails(tmp_path: Path) -> None:
    good = (
        "```console\n$ harness plan -k load-int8-exact\n$ harness plan -k nothing  # exit 5\n```\n"
    )
    assert check_page(_page(tmp_path, good), tmp_path) == []
    bad = "```console\n$ harness plan -k nothing\n```\n"
    with pytest.raises(AssertionError, match="exited 5, the docs say 0"):
        check_page(_page(tmp_path / "b", bad), tmp_path / "b")
