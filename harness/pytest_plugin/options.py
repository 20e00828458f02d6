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
