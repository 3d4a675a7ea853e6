"""Sliding window log: exact. One timestamp per admitted request, kept for one period.

No request is ever admitted if more than ``amount`` were admitted in the preceding ``period``.
Memory grows with the limit (O(amount) per key); denied requests are not logged.

State: a tuple of ``(timestamp_us, cost)`` pairs, oldest first.
"""

from __future__ import annotations

from ..rates import Limit
from .base import NEVER, Outcome, State

__all__ = ["decide"]


def decide(state: State | None, now: int, limit: Limit, cost: float) -> Outcome:
    period = limit.period_us
    horizon = now - period
    # An entry logged at t stops counting at t + period exactly.
    entries = [entry for entry in state if entry[0] > horizon] if state else []
    used = sum(entry[1] for entry in entries)
    if used + cost <= limit.amount:
        if cost:
            entries.append((now, cost))
            used += cost
        reset = entries[-1][0] + period - now if entries else 0
        return Outcome(True, limit.amount, limit.amount - used, reset, 0, 0, tuple(entries), reset)
    reset = entries[-1][0] + period - now if entries else 0
    retry: float = NEVER
    if cost <= limit.amount:
        # Wait until enough of the oldest entries have left the window.
        to_free = used + cost - limit.amount
        for timestamp, entry_cost in entries:
            to_free -= entry_cost
            if to_free <= 0:
                retry = timestamp + period - now
                break
        else:
            # Only float rounding of fractional costs gets here; once every entry has left
            # the window the request passes, since its cost fits the limit.
            retry = entries[-1][0] + period - now
    return Outcome(False, limit.amount, limit.amount - used, reset, retry, 0, None, 0)
