"""Giving a request's cost back: the state as if a hit made at ``at`` had not happened.

A request can be admitted by one door and refused by a later one (the middleware's rules,
then a route's dependency): the later refusal gives back what the earlier doors took, so a
refused request costs nothing anywhere. ``refund(state, at, limit, cost)`` is pure, like the
deciders, and mirrors ``refund`` in the Redis script.

    REFUNDS["fixed_window"]((window, 5), at, limit, 1)     # (window, 4) if still that window
"""

from __future__ import annotations

from collections.abc import Callable

from .._rates import Limit
from .base import State, scaled_cost, whole

__all__ = ["REFUNDS", "Refund"]

Refund = Callable[[State, int, Limit, float], State]


def _fixed_window(state: State, at: int, limit: Limit, cost: float) -> State:
    window, count = state
    if window != at // limit.period_us:
        return state  # a new window started since: the old count no longer matters
    return (window, max(0, count - cost))


def _sliding_window_counter(state: State, at: int, limit: Limit, cost: float) -> State:
    window, current, previous = state
    hit_window = at // limit.period_us
    if window == hit_window:
        return (window, whole(max(0, current - cost)), previous)
    if window == hit_window + 1:  # the hit's window is now the previous one
        return (window, current, whole(max(0, previous - cost)))
    return state


def _token_bucket(state: State, at: int, limit: Limit, cost: float) -> State:
    level, last = state
    full = limit.burst * limit.period_us
    return (min(full, level + scaled_cost(cost, limit.period_us)), last)


def _theoretical_arrival(state: State, at: int, limit: Limit, cost: float) -> State:
    # GCRA and the leaky bucket: the hit pushed the arrival time by the cost's step.
    return (state[0] - scaled_cost(cost, limit.period_us),)


def _sliding_window_log(state: State, at: int, limit: Limit, cost: float) -> State:
    entries = list(state)
    for index in range(len(entries) - 1, -1, -1):
        if entries[index] == (at, cost):
            del entries[index]
            break
    return tuple(entries)


REFUNDS: dict[str, Refund] = {
    "fixed_window": _fixed_window,
    "sliding_window_counter": _sliding_window_counter,
    "token_bucket": _token_bucket,
    "gcra": _theoretical_arrival,
    "leaky_bucket": _theoretical_arrival,
    "sliding_window_log": _sliding_window_log,
}
