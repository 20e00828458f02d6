"""The worker's collection after each attempt (:func:`harness.worker.main._collect_garbage`):
young generations where that frees all the attempt left, a full collection otherwise, and a
full one at least every ``FULL_COLLECT_EVERY`` attempts. In-process, no worker started."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from harness.worker import main


class _Node:
    def __init__(self) -> None:
        self.me = self  # only the cyclic collector frees it


@pytest.fixture
def collector(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The generations ``_collect_garbage`` asked ``gc.collect`` for, with fresh counters."""
    calls: list[int] = []
    real = gc.collect

    def spy(generation: int = 2) -> int:
        calls.append(generation)
        return real(generation)

    monkeypatch.setattr(main.gc, "collect", spy)
    monkeypatch.setattr(main, "_light_collections", 0)
    monkeypatch.setattr(main, "_old_collections", (-1, -1))
    enabled = gc.isenabled()
    gc.disable()  # no automatic collection between the calls: only the worker's own count
    try:
        main._collect_garbage(imported=False)  # settles the counters: a full collection
        calls.clear()
        yield calls
    finally:
        if enabled:
            gc.enable()


def test_a_cheap_attempt_ends_with_a_young_collection_that_frees_its_cycles(
    collector: list[int],
) -> None:
    node = weakref.ref(_Node())
    assert node() is not None
    main._collect_garbage(imported=False)
    assert collector == [1]
    assert node() is None


def test_an_attempt_that_reached_the_oldest_generation_gets_a_full_collection(
    collector: list[int],
) -> None:
    node = _Node()
    gc.collect()  # the target's own full collection: its survivors are in the oldest generation
    ref = weakref.ref(node)
    del node
    collector.clear()
    main._collect_garbage(imported=False)
    assert collector == [2]
    assert ref() is None


def test_a_full_collection_comes_at_least_every_n_attempts(collector: list[int]) -> None:
    for _ in range(main.FULL_COLLECT_EVERY + 1):
        main._collect_garbage(imported=False)
    assert collector == [1] * main.FULL_COLLECT_EVERY + [2]
