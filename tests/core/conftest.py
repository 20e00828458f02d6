"""Fixtures for the core tests (helpers live in corecases.py)."""

from corecases import project

__all__ = ["project"]
