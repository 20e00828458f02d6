"""One set of real runs and a comparison, shared by the report tests (they only read it)."""

from __future__ import annotations

from pathlib import Path

import pytest
from reportruns import Reports, build


@pytest.fixture(scope="session")
def reports(tmp_path_factory: pytest.TempPathFactory) -> Reports:
    return build(Path(tmp_path_factory.mktemp("reports")))
