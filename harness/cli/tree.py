"""The ``harness`` argument parser as data: every command with its options and subcommands
(what shell completion is generated from), the examples of each ``--help`` epilog, and a strict
check of one command line against the real parser (what the docs and help tests run).

Example::

    parser = build_parser()
    for cmd in commands(parser):                      # ("",), ("run",), ("refs", "bless"), ...
        print(" ".join(cmd.path), cmd.options)
    check_command_line(parser, ["run", "-k", "t2va-int8"])    # ok: returns the Namespace
    check_command_line(parser, ["run", "--no-such-flag"])     # CommandLineError, one line
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

__all__ = [
    "Command",
    "CommandLineError",
    "check_command_line",
    "commands",
    "epilog_examples",
    "shell_commands",
]


class CommandLineError(ValueError):
    """A command line the parser refuses, or one that names an option only by a prefix."""


@dataclass(frozen=True)
class Command:
    """One node of the parser tree: ``path`` is () for ``harness`` itself."""

    path: tuple[str, ...]
    parser: argparse.ArgumentParser
    options: tuple[str, ...]  # every option string, e.g. ("-k", "--platform", "--help")
    value_options: tuple[str, ...]  # the options that take a value
    subcommands: tuple[str, ...]


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def commands(parser: argparse.ArgumentParser) -> list[Command]:
    """Every command of the tree, parents before children, in the parser's order."""

    def walk(path: tuple[str, ...], p: argparse.ArgumentParser) -> Iterator[Command]:
        subs = _subparsers(p)
        options = tuple(s for a in p._actions for s in a.option_strings)
        valued = tuple(
            s for a in p._actions if a.option_strings and a.nargs != 0 for s in a.option_strings
        )
        yield Command(path, p, options, valued, tuple(subs))
        for name, child in subs.items():
            yield from walk((*path, name), child)

    return list(walk((), parser))


def epilog_examples(parser: argparse.ArgumentParser) -> list[list[str]]:
    """The command lines (argv after ``harness``) of the ``examples:`` (or ``example:``) part
    of ``parser``'s epilog: indented lines starting with ``harness``, a trailing backslash
    joining the next line, a ``#`` comment dropped."""
    text = parser.epilog or ""
    part = re.split(r"^examples?:\s*$", text, maxsplit=1, flags=re.M)
    if len(part) < 2:
        return []
    lines = part[1].replace("\\\n", " ").splitlines()
    found: list[list[str]] = []
    for line in lines:
        if not line.startswith("  ") and line.strip():
            break  # the examples end at the first unindented line
        found.extend(argv[1:] for argv in shell_commands(line) if argv[0] == "harness")
    return found


def shell_commands(line: str) -> list[list[str]]:
    """The argv of each simple command of a shell ``line``: split at ``|``, ``&&``, ``||``,
    ``;``, redirections dropped with their target, leading ``NAME=value`` assignments
    skipped, a ``#`` comment dropped, a ``<placeholder>`` kept as the word ``{placeholder}``."""
    line = re.sub(r"<([A-Za-z][\w.-]*)>", r"{\1}", line)  # a <placeholder> is a word
    line = re.sub(r"(^|\s)\d*>&\d+", " ", line)  # 2>&1: no file, no argument
    line = re.sub(r"(^|\s)\d+(>>?)", r"\1\2", line)  # 2> file: as > file
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    found: list[list[str]] = []
    segment: list[str] = []
    redirect = False
    for word in [*lexer, ";"]:
        if word and set(word) <= set("<>&") and word != "&&" and word != "&":
            redirect = True  # > file, >> file, < file, &> file: the file is not an argument
        elif word and set(word) <= set("|&;()"):
            if segment:
                found.append(segment)
            segment = []
        elif redirect:
            redirect = False  # the redirection's target; what follows is the same command
        elif not segment and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", word):
            continue
        else:
            segment.append(word)
    return found


def check_command_line(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace:
    """``argv`` parsed by ``parser`` exactly as ``harness`` would parse it, and every option
    spelled in full (argparse would take ``--dur`` for ``--durations``: a doc that abbreviates
    rots when a second option shares the prefix). Raises :class:`CommandLineError` with the
    parser's own message."""
    tree = {c.path: c for c in commands(parser)}
    path: tuple[str, ...] = ()
    known = set(tree[()].options)
    skip_value = False
    for word in argv:
        if skip_value:
            skip_value = False
            continue
        if word == "--":
            break
        if word.startswith("-") and len(word) > 1:
            flag = word.split("=", 1)[0]
            if flag not in known:
                where = " ".join(("harness", *path))
                raise CommandLineError(
                    f"harness {shlex.join(argv)}: {flag} is not an option of `{where}` "
                    "(spell options in full)"
                )
            valued = tree[path].value_options + tree[()].value_options
            skip_value = "=" not in word and flag in valued
            continue
        if (*path, word) in tree:
            path = (*path, word)
            known |= set(tree[path].options)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            args = parser.parse_args(list(argv))
    except SystemExit as exc:
        if exc.code == 0:  # --help, --version: printed and done
            return argparse.Namespace(command=None)
        why = err.getvalue().strip().splitlines()
        raise CommandLineError(
            f"harness {shlex.join(argv)}: {why[-1] if why else f'exit {exc.code}'}"
        ) from None
    return args
