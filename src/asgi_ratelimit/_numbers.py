"""Numbers read from configuration (a rules file holds integers of any size), checked without
an ``OverflowError``.

    as_float(10**400)                    # inf: no float holds it
    math.isfinite(as_float(10**400))     # False, where math.isfinite(10**400) raises
"""

from __future__ import annotations

import math

__all__ = ["as_float"]


def as_float(value: float) -> float:
    """``value`` as a float; an integer beyond a float's range is infinite, of its sign."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf
