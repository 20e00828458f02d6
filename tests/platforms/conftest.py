"""Fixtures for the platform tests (helpers live in platcases.py)."""
