"""The ``ranks`` and ``replicated`` keys of a multi-rank case (``kind`` pipeline or quant).

Every problem is one line naming the file, the case, the key, the value and what was expected.
"""

from __future__ import annotations

import re
from typing import Any

from harness.cases.fields import Ctx, str_list, type_ok
from harness.errors import CaseFileError

# The kinds whose target may run in one process per rank.
RANK_KINDS: tuple[str, ...] = ("pipeline", "quant")
MAX_RANKS = 64
_PATTERN = re.compile(r"[A-Za-z0-9_.*?\[\]!-]+")


def parse_ranks(ctx: Ctx, raw: dict[str, Any]) -> tuple[int, tuple[str, ...]]:
    """``ranks`` (default 1) and ``replicated`` (default none) of one case table."""
    if "ranks" not in raw:
        if "replicated" in raw:
            raise ctx.fail(
                "replicated",
                raw["replicated"],
                "a multi-rank case: set ranks = 2 (or more) beside it",
            )
        return 1, ()
    ranks = raw["ranks"]
    if not type_ok(ranks, (int,)) or not 1 <= ranks <= MAX_RANKS:
        raise ctx.fail("ranks", ranks, f"a positive integer, at most {MAX_RANKS}")
    if raw["kind"] not in RANK_KINDS:
        raise CaseFileError(
            ctx.path,
            f"{ctx.where}: key 'ranks' = {ranks!r}: kind = {raw['kind']!r} does not run ranks; "
            f"expected it only on kinds {', '.join(RANK_KINDS)} (a server case's ranks are "
            "[case.server] ranks)",
        )
    if "target" not in raw:
        raise ctx.fail(
            "ranks",
            ranks,
            "a case with a 'target' (\"module:function\", run in every rank); a 'command' "
            "case starts its own ranks (torchrun)",
        )
    replicated = str_list(ctx, "replicated", raw.get("replicated", []))
    bad = [p for p in replicated if not _PATTERN.fullmatch(p)]
    if bad:
        raise ctx.fail(
            "replicated",
            raw["replicated"],
            'fingerprint names or fnmatch patterns such as "denoise.*" (letters, digits, '
            f"'.', '_', '-', '*', '?', '[]'); not: {bad}",
        )
    if replicated and ranks < 2:
        raise ctx.fail("replicated", raw["replicated"], "ranks = 2 or more beside it")
    return ranks, replicated
