"""Sliding window counter: two counters approximate a sliding window in O(1) memory.

The estimate at ``elapsed`` microseconds into the current window is
``current + floor(previous * (period - elapsed) / period)`` (the previous window's count,
weighted by how much of it still overlaps the sliding window, rounded down as in Cloudflare's
write-up). A request passes when ``estimate + cost <= amount``.

State: ``(window_index, current_count, previous_count)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from ..rates import Limit
from .base import NEVER, Outcome, State

__all__ = ["decide"]


def decide(state: State | None, now: int, limit: Limit, cost: float) -> Outcome:
    period = limit.period_us
    window = now // period
    elapsed = now - window * period
    current: float = 0
    previous: float = 0
    if state is not None:
        if state[0] == window:
            current, previous = state[1], state[2]
        elif state[0] == window - 1:
            previous = state[1]
    estimate = _estimate(current, previous, elapsed, period)
    if estimate + cost <= limit.amount:
        current += cost
        reset = _wait_until_at_most(0, current, previous, elapsed, period)
        ttl = 2 * period - elapsed if current else period - elapsed
        remaining = limit.amount - estimate - cost
        return Outcome(True, limit.amount, remaining, reset, 0, 0, (window, current, previous), ttl)
    retry: float = NEVER
    if cost <= limit.amount:
        retry = _wait_until_at_most(limit.amount - cost, current, previous, elapsed, period)
    reset = _wait_until_at_most(0, current, previous, elapsed, period)
    remaining = max(0, limit.amount - estimate)
    return Outcome(False, limit.amount, remaining, reset, retry, 0, None, 0)


def _estimate(current: float, previous: float, elapsed: int, period: int) -> float:
    # The same float operations, in the same order, as the Lua script.
    return current + math.floor(previous * (period - elapsed) / period)


def _wait_until_at_most(
    target: float, current: float, previous: float, elapsed: int, period: int
) -> int:
    """Microseconds until the estimate first drops to ``target`` or below."""
    if _estimate(current, previous, elapsed, period) <= target:
        return 0
    if current <= target:
        # Still inside this window: solve floor(previous * (period - e) / period) <= target - cur.
        # floor(x) <= a holds exactly when x < floor(a) + 1; flooring a fractional allowance
        # here keeps the guess within a microsecond or two of the answer (a raw fractional
        # allowance would start the walk up to a whole window early).
        allowance = math.floor(target - current)
        guess = math.floor(period - (allowance + 1) * period / previous) + 1
        at = _first_true(
            lambda e: _estimate(current, previous, e, period) <= target,
            max(guess, elapsed),
            elapsed,
        )
        if at < period:
            return at - elapsed
    # In the next window the current count becomes the weighted previous one.
    if current == 0:
        return period - elapsed
    guess = math.floor(period - (math.floor(target) + 1) * period / current) + 1
    at = _first_true(lambda e: _estimate(0, current, e, period) <= target, max(guess, 0), 0)
    return period - elapsed + min(at, period)


def _first_true(predicate: Callable[[int], bool], guess: int, low: int) -> int:
    """The smallest integer >= low where a monotone predicate holds, starting near ``guess``.

    The closed-form guess can be off by a microsecond through float rounding; walking from it
    makes the answer exactly the first microsecond at which the request passes.
    """
    at = guess
    while not predicate(at):
        at += 1
    while at > low and predicate(at - 1):
        at -= 1
    return at
