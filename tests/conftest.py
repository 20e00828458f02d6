"""Fixtures for every test folder."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _not_under_github_actions(monkeypatch: pytest.MonkeyPatch) -> None:
    """The harness's own tests run many deliberately failing cases: under GitHub Actions they
    must not annotate the pull request or append to its job summary. Tests of that behaviour
    set the variables themselves (tests/report/test_github*.py)."""
    for name in ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY", "GITHUB_WORKSPACE"):
        monkeypatch.delenv(name, raising=False)
