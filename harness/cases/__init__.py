"""Floor 2: case files loaded and validated (:mod:`.load`), and planned (:mod:`.plan`)."""

from __future__ import annotations

from harness.cases.load import LoadResult, discover, load_file, load_suite, parse_case
from harness.cases.plan import PlanItem, build_plan

__all__ = [
    "LoadResult",
    "PlanItem",
    "build_plan",
    "discover",
    "load_file",
    "load_suite",
    "parse_case",
]
