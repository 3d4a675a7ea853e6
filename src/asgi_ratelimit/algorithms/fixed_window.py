"""Fixed window: one counter per window, windows aligned to the epoch (``now // period``).

Cheapest in memory (one number per key) but a client can spend its quota at the end of one
window and again at the start of the next: up to 2x the limit in any span of one period.

State: ``(window_index, count)``.
"""

from __future__ import annotations

from .._rates import Limit
from .base import NEVER, Outcome, State

__all__ = ["decide"]


def decide(state: State | None, now: int, limit: Limit, cost: float) -> Outcome:
    period = limit.period_us
    window = now // period
    count = state[1] if state is not None and state[0] == window else 0
    until_next_window = (window + 1) * period - now
    # cost <= amount - count, not count + cost <= amount: a tiny fractional cost must not
    # vanish in the rounding of a sum and pass a full window.
    if cost <= limit.amount - count:
        count += cost
        reset = until_next_window if count else 0
        # The whole quota comes back at once, when the window ends.
        return Outcome(
            True, limit.amount, limit.amount - count, reset, 0, 0, (window, count), reset, reset
        )
    retry = until_next_window if cost <= limit.amount else NEVER
    reset = until_next_window if count else 0
    return Outcome(False, limit.amount, limit.amount - count, reset, retry, 0, None, 0, 0)
