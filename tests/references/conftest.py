"""Fixtures of the reference-store tests (helpers live in ``refs_helpers``)."""

from refs_helpers import make_run, store_root

__all__ = ["make_run", "store_root"]
