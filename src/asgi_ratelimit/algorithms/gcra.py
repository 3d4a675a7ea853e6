"""GCRA (generic cell rate algorithm): the token bucket's decisions in one stored number.

It stores the theoretical arrival time (TAT): when the bucket would be full again. A request
passes when ``max(tat, now) + cost * T - now <= burst * T`` with ``T = period / amount``.
Times are scaled by ``amount`` (``now * amount``) so that ``T`` is the integer ``period_us``
and every comparison is exact.

State: ``(tat_scaled,)``.
"""

from __future__ import annotations

from .._rates import Limit
from .base import NEVER, Outcome, State, ceil_div, scaled_cost

__all__ = ["decide"]


def decide(state: State | None, now: int, limit: Limit, cost: float) -> Outcome:
    period = limit.period_us
    tolerance = limit.burst * period
    now_scaled = now * limit.amount
    tat = now_scaled if state is None else max(state[0], now_scaled)
    new_tat = tat + scaled_cost(cost, period)
    backlog = new_tat - now_scaled
    if backlog <= tolerance:
        reset = ceil_div(backlog, limit.amount)
        remaining = (tolerance - backlog) // period
        # One more unit fits once the backlog is down to tolerance - (remaining + 1) * period.
        more = ceil_div(backlog - tolerance + (remaining + 1) * period, limit.amount)
        if remaining >= limit.burst:
            more = 0
        return Outcome(True, limit.burst, remaining, reset, 0, 0, (new_tat,), reset, more)
    retry = ceil_div(backlog - tolerance, limit.amount) if cost <= limit.burst else NEVER
    remaining = (tolerance - (tat - now_scaled)) // period
    reset = ceil_div(tat - now_scaled, limit.amount)
    return Outcome(False, limit.burst, remaining, reset, retry, 0, None, 0, 0)
