"""The plugin's command-line options: their declaration, and the paths they name relative to
the rootdir (import-light)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.pytest_plugin.shard import add_shard_options


def _root(config: pytest.Config) -> Path:
    return Path(config.rootpath)


def _opt_path(config: pytest.Config, name: str, default: str) -> Path:
    value = config.getoption(name)
    p = Path(value) if value else _root(config) / default
    return p if p.is_absolute() else Path.cwd() / p


def check_platform_option(config: pytest.Config) -> None:
    """A --harness-platform that names no known platform is a usage error before collection
    (it would otherwise plan nothing, or plan items for a platform nobody can run)."""
    names = config.getoption("harness_platform") or []
    if not names:
        return
    from harness.platforms import known

    for name in names:
        if name not in known():
            raise pytest.UsageError(
                f"--harness-platform {name!r}: not a known platform; expected one of "
                f"{', '.join(known())}"
            )


def add_options(parser: pytest.Parser) -> None:
    """Every ``--harness-*`` option, in the group ``pytest --help`` shows as "harness"."""
    group = parser.getgroup("harness", "harness case suite")
    group.addoption(
        "--harness-cases",
        metavar="DIR",
        default=None,
        help="case files or folder collected by `pytest harness/` (default: cases/)",
    )
    group.addoption(
        "--harness-runner",
        metavar="PROFILE",
        default=None,
        help="runner profile name in runners/ or a path (default: cpu)",
    )
    group.addoption(
        "--harness-platform",
        metavar="NAME",
        action="append",
        default=None,
        help="platform to run cases on (repeatable; default: the profile's)",
    )
    group.addoption(
        "--harness-code-root",
        metavar="DIR",
        action="append",
        default=None,
        help="folder put on the workers' sys.path (default: targets/tinyav)",
    )
    group.addoption(
        "--harness-out",
        metavar="DIR",
        default=None,
        help="where run folders go (default: reports/)",
    )
    group.addoption(
        "--harness-shuffle",
        metavar="SEED",
        type=int,
        default=None,
        help="collect the cases in a random order drawn from SEED (like harness run --shuffle)",
    )
    group.addoption(
        "--harness-references",
        metavar="DIR",
        default=None,
        help="reference store, read-only (default: references/)",
    )
    group.addoption(
        "--harness-base",
        metavar="REV",
        default=None,
        help="compare this revision (base) with --harness-head on this runner, interleaved: "
        "one item per case whose outcome is the comparison's verdict",
    )
    group.addoption(
        "--harness-head",
        metavar="REV",
        default="HEAD",
        help="the head revision of a --harness-base comparison (default: HEAD)",
    )
    group.addoption(
        "--harness-strict",
        action="store_true",
        default=False,
        help="with --harness-base: inconclusive, suspect, flaky and missing fail too",
    )
    group.addoption(
        "--harness-reuse-workers",
        action="store_true",
        default=False,
        help="with --harness-base: one worker per side instead of a fresh pair per round",
    )
    group.addoption(
        "--harness-rounds",
        metavar="N",
        type=int,
        default=None,
        help="with --harness-base: most rounds per batch, 2-200 (default 7; as harness compare "
        "--rounds)",
    )
    group.addoption(
        "--harness-real-only",
        action="store_true",
        default=False,
        help="turn results on simulated platforms into skips that say why",
    )
    add_shard_options(group)
