"""The fenced code blocks of README.md and docs/*.md, and how each is checked.

A block's info string is its language and then its tag:

* ```` ```console ```` or ```` ```sh ````: commands, run for real in a scratch copy of the
  repository (lines starting ``$ `` in a console block; every line of a sh/bash block). Only
  cheap commands may run: ``harness plan``, ``platforms``, ``refs verify|bless``, ``report``,
  ``completion``, ``init``, ``--version``, ``harness run -k ...``, and a whole ``harness run``
  only in a folder the block ``cd``'d into (a scaffold of ``harness init``). ``# exit N`` on a
  command line is its expected exit code (default 0); ``cd DIR`` moves the following commands.
* ```` ```console parse-only: <reason> ````: every command checked without running it: a
  ``harness`` command through the real argument parser (options spelled in full), ``pytest``
  flags against ``pytest --help``, a script's path and flags against its source, ``pip
  install -e '.[extras]'`` against pyproject.toml's extras, a tool against the PATH.
* ```` ```console skip: <reason> ````: listed as skipped with the reason.
* ```` ```toml case ````, ```` ```toml profile ````, ```` ```toml pyproject ````: parsed with
  tomllib and loaded by the real case loader or runner-profile loader (pyproject: tomllib
  only). A toml block without a kind fails.
* ```` ```python ````: compiled. ```` ```text ````, ```` ```json ```` and the like: prose.

The tag may also come from an HTML comment on the line before the block:
``<!-- snippet: parse-only: needs a GPU -->``.
"""

from __future__ import annotations

import re
import shlex
import tomllib
from dataclasses import dataclass
from pathlib import Path

from harness.cli.tree import shell_commands

COMMAND_LANGS = ("console", "sh", "bash", "shell")
PROSE_LANGS = ("text", "json", "yaml", "diff", "")
TOML_KINDS = ("case", "profile", "pyproject")
# harness commands cheap enough to run for real in a scratch copy (the first words of argv)
RUNNABLE = (
    ("plan",),
    ("platforms",),
    ("refs", "verify"),
    ("refs", "bless"),  # into the scratch copy's store
    ("report",),
    ("completion",),
    ("init",),
)


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    lang: str
    tag: str  # what follows the language in the info string (or the comment before it)
    body: str

    @property
    def where(self) -> str:
        return f"{self.path.name}:{self.line}"

    @property
    def mode(self) -> str:
        """run, parse-only or skip (commands); the kind (toml)."""
        return self.tag.split(":", 1)[0].strip()

    @property
    def reason(self) -> str:
        return self.tag.split(":", 1)[1].strip() if ":" in self.tag else ""


@dataclass(frozen=True)
class CommandLine:
    line: int
    text: str  # the shell line, continuations joined
    argvs: list[list[str]]  # its simple commands
    exit_code: int  # expected, from "# exit N"


_FENCE = re.compile(r"^(```+|~~~+)\s*([^\s`]*)\s*(.*?)\s*$")
_COMMENT_TAG = re.compile(r"^<!--\s*snippet:\s*(.*?)\s*-->\s*$")


def blocks(path: Path) -> list[Block]:
    """Every fenced block of a Markdown file."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, lang, tag = m.groups()
        if not tag and i > 0 and (c := _COMMENT_TAG.match(lines[i - 1])):
            tag = c.group(1)
        start = i
        i += 1
        body = []
        while i < len(lines) and not lines[i].startswith(fence):
            body.append(lines[i])
            i += 1
        found.append(Block(path, start + 1, lang.lower(), tag, "\n".join(body)))
        i += 1
    return found


def command_lines(block: Block) -> list[CommandLine]:
    """The command lines of a command block, each with its simple commands."""
    raw = block.body.splitlines()
    out = []
    i = 0
    while i < len(raw):
        text, first = raw[i], i
        i += 1
        if block.lang == "console":
            if not text.startswith("$ "):
                continue  # output shown after a command
            text = text[2:]
        elif not text.strip() or text.lstrip().startswith("#"):
            continue
        while text.rstrip().endswith("\\") and i < len(raw):
            cont = raw[i][2:] if raw[i].startswith("> ") else raw[i]
            text = text.rstrip()[:-1] + " " + cont.strip()
            i += 1
        m = re.search(r"#\s*exit (\d+)\b", text)
        out.append(
            CommandLine(
                block.line + 1 + first,
                text,
                shell_commands(text),
                int(m.group(1)) if m else 0,
            )
        )
    return out


def toml_data(block: Block) -> dict[str, object]:
    try:
        return tomllib.loads(block.body)
    except tomllib.TOMLDecodeError as exc:
        raise AssertionError(f"{block.where}: not valid TOML: {exc}") from None


def harness_argv(argv: list[str]) -> list[str] | None:
    """The arguments after ``harness`` (or ``python -m harness.cli``), or None."""
    if argv[:1] == ["harness"]:
        return argv[1:]
    if argv[:3] in (["python", "-m", "harness.cli"], ["python3", "-m", "harness.cli"]):
        return argv[3:]
    return None


def pytest_argv(argv: list[str]) -> list[str] | None:
    if argv[:1] == ["pytest"]:
        return argv[1:]
    if argv[:3] in (["python", "-m", "pytest"], ["python3", "-m", "pytest"]):
        return argv[3:]
    return None


def flags(argv: list[str]) -> list[str]:
    """The option words of an argv (``--x=1`` as ``--x``), up to a ``--``."""
    out = []
    for word in argv:
        if word == "--":
            break
        if re.fullmatch(r"--?[A-Za-z][\w-]*(=.*)?", word):
            out.append(word.split("=", 1)[0])
    return out


def inline_harness_commands(path: Path) -> list[tuple[int, str]]:
    """Inline code spans of prose that start with ``harness <command>`` (outside fences)."""
    found = []
    fenced = False
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        for span in re.findall(r"`([^`]+)`", line):
            if re.match(r"harness [a-z]", span):
                found.append((n, span))
    return found


def quote(argv: list[str]) -> str:
    return shlex.join(argv)
