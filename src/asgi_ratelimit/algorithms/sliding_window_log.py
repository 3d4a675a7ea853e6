"""Sliding window log: exact. One timestamp per admitted request, kept for one period.

No request is ever admitted if more than ``amount`` were admitted in the preceding ``period``.
Memory grows with the limit (O(amount) per key); denied requests are not logged.

State: a tuple of ``(timestamp_us, cost)`` pairs, oldest first.
"""

from __future__ import annotations

import math

from .._rates import Limit
from .base import NEVER, Outcome, State

__all__ = ["decide"]


def decide(state: State | None, now: int, limit: Limit, cost: float) -> Outcome:
    period = limit.period_us
    horizon = now - period
    # An entry logged at t stops counting at t + period exactly.
    entries = [entry for entry in state if entry[0] > horizon] if state else []
    used = sum(entry[1] for entry in entries)
    amount = limit.amount
    if cost <= amount - used:  # not used + cost: see fixed_window
        if cost:
            entries.append((now, cost))
            used += cost
        reset = entries[-1][0] + period - now if entries else 0
        wanted = math.floor(amount - used) + 1  # one more than is left
        more = _wait(entries, wanted, amount, used, period, now) if wanted <= amount else 0
        return Outcome(True, amount, amount - used, reset, 0, 0, tuple(entries), reset, more)
    reset = entries[-1][0] + period - now if entries else 0
    retry = _wait(entries, cost, amount, used, period, now) if cost <= amount else NEVER
    return Outcome(False, amount, amount - used, reset, retry, 0, None, 0, 0)


def _wait(
    entries: list[tuple[int, float]], cost: float, amount: int, used: float, period: int, now: int
) -> int:
    """Microseconds until a request of ``cost`` (at most ``amount``) fits in the log."""
    if cost <= amount - used:
        return 0

    # Wait until the oldest k entries have left the window, for the smallest k that frees
    # enough. The running subtraction finds k; fractional costs can round it off by one,
    # so it is settled with the very test decide() will apply then.
    def fits_without(k: int) -> bool:
        left: float = sum(entry[1] for entry in entries[k:])
        return cost <= amount - left

    to_free = used + cost - amount
    k = 0
    while k < len(entries) and to_free > 0:
        to_free -= entries[k][1]
        k += 1
    while k < len(entries) and not fits_without(k):
        k += 1
    while k > 1 and fits_without(k - 1):
        k -= 1
    return entries[k - 1][0] + period - now
