"""Paths from the plugin's command-line options, relative to the rootdir (import-light)."""

from __future__ import annotations

from pathlib import Path

import pytest


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
