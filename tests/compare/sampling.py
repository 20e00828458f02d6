"""Shared by the simulation tests: is a simulated rate within sampling error of its target?"""

from __future__ import annotations

import math


def within(rate: float, expected: float, trials: int) -> bool:
    """``rate`` is within 4 binomial standard errors of ``expected`` over ``trials``."""
    return abs(rate - expected) <= 4 * math.sqrt(expected * (1 - expected) / trials)
