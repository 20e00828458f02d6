"""The scratch repository fixture of the comparison end-to-end tests."""

from __future__ import annotations

from typing import Any

import pytest
from scratchrepo import make_scratch


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A git repository with tinyav at a base commit and one branch per planted change, and a
    work folder with the case files (the default case plus one that fails on every side)."""
    return make_scratch(tmp_path_factory.mktemp("compare-e2e"))
