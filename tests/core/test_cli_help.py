"""`harness --version`, `harness completion bash|zsh`, and the examples of every `--help`: each
example is run through the real parser, options spelled in full, so help cannot drift from the
CLI."""

from __future__ import annotations

import argparse
import importlib.metadata
import shlex
import shutil
import subprocess
import sys

import pytest

import harness
from harness.cli import build_parser, version
from harness.cli.completion import script
from harness.cli.tree import CommandLineError, check_command_line, commands, epilog_examples

TREE = commands(build_parser())


def _examples() -> list[tuple[str, list[str]]]:
    return [
        (" ".join(("harness", *c.path)), argv) for c in TREE for argv in epilog_examples(c.parser)
    ]


def check_examples(parser: argparse.ArgumentParser) -> None:
    """What the test below does for the real CLI: every example of every epilog parses."""
    for cmd in commands(parser):
        for argv in epilog_examples(cmd.parser):
            assert argv[: len(cmd.path)] == list(cmd.path) or not cmd.path, (cmd.path, argv)
            check_command_line(parser, argv)


@pytest.mark.parametrize("cmd", TREE, ids=lambda c: " ".join(("harness", *c.path)))
def test_every_command_has_help_examples(cmd: object) -> None:
    assert epilog_examples(cmd.parser), f"`{cmd.parser.prog} --help` shows no example"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("where", "argv"), _examples(), ids=lambda x: shlex.join(x) if isinstance(x, list) else x
)
def test_every_help_example_parses(where: str, argv: list[str]) -> None:
    path = where.split()[1:]
    assert argv[: len(path)] == path, f"`{where} --help` shows an example of another command"
    check_command_line(build_parser(), argv)


def test_a_help_example_with_a_bad_flag_fails() -> None:
    parser = build_parser()
    check_examples(parser)  # the real examples pass ...
    run = next(c.parser for c in commands(parser) if c.path == ("run",))
    for bad in ("harness run --no-such-flag 3", "harness run --dur prev/report.json"):
        run.epilog = f"examples:\n  {bad}\n"
        with pytest.raises(CommandLineError, match=r"(--no-such-flag|--dur) is not an option"):
            check_examples(parser)  # ... one unknown or abbreviated flag does not


def test_a_bad_subcommand_or_value_fails() -> None:
    with pytest.raises(CommandLineError, match="invalid choice"):
        check_command_line(build_parser(), ["rnu"])
    with pytest.raises(CommandLineError, match="--repeats: invalid int value"):
        check_command_line(build_parser(), ["run", "--repeats", "two"])


def test_version_is_the_installed_distribution_s() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "harness.cli", "--version"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.strip() == f"harness {version()}"
    try:
        assert version() == importlib.metadata.version("harness")
    except importlib.metadata.PackageNotFoundError:
        assert version() == harness.__version__


def test_version_falls_back_to_the_package_s(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    assert version() == harness.__version__


def _complete(shell_script: str, words: list[str]) -> list[str]:
    """COMPREPLY of the generated bash function for the command line ``words`` (the last one
    being completed), in a real bash."""
    line = " ".join(shlex.quote(w) for w in words)
    prog = (
        f"{shell_script}\nCOMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; _harness; "
        'printf "%s\\n" "${COMPREPLY[@]}"'
    )
    out = subprocess.run(["bash", "-c", prog], capture_output=True, text=True, check=True)
    return out.stdout.split()


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_bash_completion_offers_every_command_and_option(tmp_path: object) -> None:
    bash = script(build_parser(), "bash")
    subs = set(next(c for c in TREE if c.path == ()).subcommands)
    assert set(_complete(bash, ["harness", ""])) >= subs | {"completion"}
    assert _complete(bash, ["harness", "refs", "b"]) == ["bless"]
    assert _complete(bash, ["harness", "completion", "z"]) == ["zsh"]
    assert _complete(bash, ["harness", "run", "--platform", "h"]) == ["hip"]
    assert _complete(bash, ["harness", "plan", "--shard-by", ""]) == ["case", "file", "kind"]
    for cmd in TREE:
        offered = set(_complete(bash, ["harness", *cmd.path, "-"]))
        assert set(cmd.options) <= offered, (cmd.path, set(cmd.options) - offered)


def test_completion_scripts_from_the_cli() -> None:
    for shell in ("bash", "zsh"):
        out = subprocess.run(
            [sys.executable, "-m", "harness.cli", "completion", shell],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert out == script(build_parser(), shell)
        assert "complete -o default -F _harness harness" in out
    assert out.startswith("#compdef harness\n") and "bashcompinit" in out
    if shutil.which("zsh"):
        subprocess.run(["zsh", "-n"], input=out, text=True, check=True)
    bad = subprocess.run(
        [sys.executable, "-m", "harness.cli", "completion", "fish"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 2 and "invalid choice: 'fish'" in bad.stderr
