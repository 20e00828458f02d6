"""What ``run`` and ``plan`` share: selecting cases and platforms from the command line."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from harness.cases import LoadResult, load_suite
from harness.errors import UsageError
from harness.platforms import REGISTRY


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


def _platforms(args: argparse.Namespace, profile_platform: str) -> list[str]:
    platforms = list(args.platforms) if args.platforms else [profile_platform]
    for p in platforms:
        if p not in REGISTRY:
            raise UsageError(f"--platform {p}: expected one of {', '.join(sorted(REGISTRY))}")
    return platforms


def platforms(args: argparse.Namespace, profile_platform: str) -> list[str]:
    platforms = list(args.platforms) if args.platforms else [profile_platform]
    for p in platforms:
        if p not in REGISTRY:
            raise UsageError(f"--platform {p}: expected one of {', '.join(sorted(REGISTRY))}")
    return platforms
