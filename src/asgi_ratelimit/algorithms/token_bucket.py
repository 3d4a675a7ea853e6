"""Token bucket: a bucket of ``burst`` tokens, refilled continuously at ``amount / period``.

Allows a burst of up to ``burst`` requests, then a steady ``amount`` per ``period``. Tokens are
kept scaled by the period (``level = tokens * period_us``) so refills are integer additions of
``amount`` per microsecond: decisions and retry times are exact. A cost is counted in the same
units, rounded up (see `scaled_cost`), so the level stays an integer even for fractional costs.

State: ``(level, last_update_us)``.
"""

from __future__ import annotations

from .._rates import Limit
from .base import NEVER, Outcome, State, ceil_div, scaled_cost

__all__ = ["decide"]


def decide(state: State | None, now: int, limit: Limit, cost: float) -> Outcome:
    period = limit.period_us
    full = limit.burst * period
    level: float
    if state is None:
        level, last = full, now
    else:
        level, last = state
        if now > last:
            level = min(full, level + (now - last) * limit.amount)
            last = now
    needed = scaled_cost(cost, period)
    if needed <= level:
        level -= needed
        reset = ceil_div(full - level, limit.amount)
        remaining = level // period
        # The next whole token: the level reaches (remaining + 1) * period.
        more = ceil_div((remaining + 1) * period - level, limit.amount) if level < full else 0
        return Outcome(True, limit.burst, remaining, reset, 0, 0, (level, last), reset, more)
    retry = ceil_div(needed - level, limit.amount) if cost <= limit.burst else NEVER
    reset = ceil_div(full - level, limit.amount)
    return Outcome(False, limit.burst, level // period, reset, retry, 0, None, 0, 0)
