"""The planner: cases x platforms, filtered by a ``-k`` expression, in a deterministic order.

Repeats, warm-ups and retries are expanded by the runner as it goes (a retry exists only after
a failure), so a plan item is one case on one platform. :func:`shuffle_plan` permutes the items
with a seed, to show that no case's result depends on the cases run before it in its worker.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from harness.errors import UsageError
from harness.model import Case


@dataclass(frozen=True)
class PlanItem:
    """One case on one platform; ``skip_reason`` set when it must not run there."""

    case: Case
    platform: str
    skip_reason: str | None = None

    @property
    def name(self) -> str:
        return self.case.display(self.platform)


def _keyword_matcher(expr: str) -> Callable[[Iterable[str]], bool]:
    """pytest's ``-k`` semantics: and/or/not over case-insensitive substrings of the names."""
    try:
        from _pytest.mark.expression import Expression
    except ImportError:  # pragma: no cover - pytest is a dependency; keep a plain fallback
        needle = expr.lower()
        return lambda names: any(needle in n.lower() for n in names)
    try:
        compiled = Expression.compile(expr)
    except Exception as exc:  # pytest raises its own ParseError type
        raise UsageError(f"-k expression {expr!r} is not valid: {exc}") from exc

    def match(names: Iterable[str]) -> bool:
        lowered = [n.lower() for n in names]

        def has(sub: str, /, **_: str | int | bool | None) -> bool:
            s = sub.lower()
            return any(s in n for n in lowered)

        return bool(compiled.evaluate(has))

    return match


def build_plan(
    cases: Sequence[Case], platforms: Sequence[str], keyword: str | None = None
) -> list[PlanItem]:
    """Every (case, platform) pair selected by ``keyword``, ordered by platform then case file."""
    matcher = _keyword_matcher(keyword) if keyword else None
    ordered = sorted(cases, key=lambda c: (c.source, c.id))
    items: list[PlanItem] = []
    for platform in platforms:
        for case in ordered:
            name = case.display(platform)
            if matcher is not None and not matcher(
                (name, case.id, case.kind, platform, *case.tags)
            ):
                continue
            skip = None
            if not case.runs_on(platform):
                skip = (
                    f"case declares platforms {list(case.platforms)}; this run targets '{platform}'"
                )
            items.append(PlanItem(case=case, platform=platform, skip_reason=skip))
    return items


def shuffle_plan(items: Sequence[PlanItem], seed: int) -> list[PlanItem]:
    """The plan in a seeded random order: the same seed gives the same order on every machine.

    Items move whole, so a case's warm-ups, repeats and retries still run back to back.

    Example::

        build_plan(cases, ["cpu"])                    # a, b, c, d
        shuffle_plan(build_plan(cases, ["cpu"]), 7)   # c, a, d, b (say), every time
    """
    out = list(items)
    random.Random(seed).shuffle(out)
    return out
