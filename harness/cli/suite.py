"""What ``run`` and ``plan`` share: selecting cases and platforms from the command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from harness.cases import LoadResult, load_suite
from harness.errors import UsageError
from harness.platforms import names as platform_names


def add_suite_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="*", type=Path, help="case files or folders (default: cases/)")
    p.add_argument(
        "-k",
        dest="keyword",
        metavar="EXPR",
        help="select cases by a pytest-style expression over their names",
    )
    p.add_argument(
        "--platform",
        action="append",
        dest="platforms",
        metavar="NAME",
        help="platform to run on (repeatable; default: the runner profile's)",
    )
    p.add_argument(
        "--runner",
        metavar="PROFILE",
        help="runner profile name in runners/ or a path to one (default: cpu)",
    )


def load(paths: Sequence[Path]) -> LoadResult:
    return load_suite(list(paths) or [Path("cases")])


def platforms(args: argparse.Namespace, profile_platform: str) -> list[str]:
    """The platforms to run on, each once: a repeated ``--platform`` would run every case twice
    into the same output files, so it is dropped with a note."""
    given = list(args.platforms) if args.platforms else [profile_platform]
    known = platform_names()
    for p in given:
        if p not in known:
            raise UsageError(f"--platform {p}: expected one of {', '.join(sorted(known))}")
    unique = list(dict.fromkeys(given))
    for p in unique:
        if given.count(p) > 1:
            print(
                f"note: --platform {p} given {given.count(p)} times; running it once",
                file=sys.stderr,
            )
    return unique
