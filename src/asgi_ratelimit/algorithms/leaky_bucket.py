"""Leaky bucket as a queue: requests leave at a constant ``amount / period``.

An admitted request is delayed until its slot (``delay``): the first waits 0, the next one
``period / amount`` later, and so on; a request that would overflow the queue of ``burst``
slots is denied. This shapes traffic to a steady rate instead of allowing bursts. The queue is
tracked as the time it empties (scaled by ``amount`` as in GCRA, so all of it is exact).

State: ``(queue_empty_at_scaled,)``.
"""

from __future__ import annotations

from .._rates import Limit
from .base import NEVER, Outcome, State, ceil_div, scaled_cost

__all__ = ["decide"]


def decide(state: State | None, now: int, limit: Limit, cost: float) -> Outcome:
    period = limit.period_us
    capacity = limit.burst * period
    now_scaled = now * limit.amount
    empty_at = now_scaled if state is None else max(state[0], now_scaled)
    queued = empty_at - now_scaled
    step = scaled_cost(cost, period)
    if queued + step <= capacity:
        delay = ceil_div(queued, limit.amount)
        new_empty_at = empty_at + step
        backlog = new_empty_at - now_scaled
        reset = ceil_div(backlog, limit.amount)
        remaining = (capacity - backlog) // period
        # As GCRA: one more slot frees once the backlog is down by one period's worth.
        more = ceil_div(backlog - capacity + (remaining + 1) * period, limit.amount)
        if remaining >= limit.burst:
            more = 0
        return Outcome(True, limit.burst, remaining, reset, 0, delay, (new_empty_at,), reset, more)
    retry = ceil_div(queued + step - capacity, limit.amount) if cost <= limit.burst else NEVER
    remaining = (capacity - queued) // period
    return Outcome(
        False, limit.burst, remaining, ceil_div(queued, limit.amount), retry, 0, None, 0, 0
    )
