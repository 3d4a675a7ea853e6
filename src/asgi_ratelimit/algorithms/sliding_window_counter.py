"""Sliding window counter: two counters approximate a sliding window in O(1) memory.

The estimate at ``elapsed`` microseconds into the current window is
``current + floor(previous * (period - elapsed) / period)`` (the previous window's count,
weighted by how much of it still overlaps the sliding window, rounded down as in Cloudflare's
write-up). A request passes when ``cost <= amount - estimate`` (``estimate + cost <= amount``
in exact arithmetic; written so that no float rounding lets a tiny cost through).
``reset_after`` and ``retry_after`` are the first microsecond at which that test passes for a
cost of ``amount`` or of the request's cost: exact, found by a closed form checked by search.

State: ``(window_index, current_count, previous_count)``.
"""

from __future__ import annotations

import functools
import math

from .._rates import Limit
from .base import NEVER, Outcome, State

__all__ = ["decide"]

#: Below this, ``floor(previous * (period - e) / period)`` in floats is the exact floor: the
#: quotient is at least 1/period from the next integer, more than half its ulp.
_EXACT_FLOOR = 2**52


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
    # _estimate, inlined (it runs on every request); with no previous count it is the current
    # one (floor(0 * x / period) adds an int 0, which changes neither value nor type).
    estimate = current + math.floor(previous * (period - elapsed) / period) if previous else current
    # cost <= amount - estimate, not estimate + cost <= amount: a tiny fractional cost must not
    # vanish in the rounding of a sum and pass a full window.
    amount = limit.amount
    if cost <= amount - estimate:
        current += cost
        if current.__class__ is float and current.is_integer():
            current = int(current)  # whole(), inlined: Redis cannot tell 2.0 from 2
        if current.__class__ is int and current > 0:
            # The usual admitted request (whole costs): the quota is restored in the next
            # window, at the closed form _full_reset_in_next_window proves exact. A busy key's
            # count changes on every request, so this is computed, not looked up.
            reset = 2 * period - elapsed - (period - 1) // current
            ttl = 2 * period - elapsed
            if estimate == current - cost:
                # No weight from the previous window: the current count weighs less, so more
                # quota comes, 1 us into the next window (_more_quota_in, inlined).
                more = period - elapsed + 1
            else:
                more = _more_quota_in(
                    amount - estimate - cost, amount, current, previous, elapsed, period
                )
        else:
            reset = _wait_until_fits(amount, amount, current, previous, elapsed, period)
            ttl = 2 * period - elapsed if current else period - elapsed
            more = _more_quota_in(
                amount - estimate - cost, amount, current, previous, elapsed, period
            )
        remaining = amount - estimate - cost
        return Outcome(True, amount, remaining, reset, 0, 0, (window, current, previous), ttl, more)
    retry: float = NEVER
    if cost <= amount:
        retry = _wait_until_fits(cost, amount, current, previous, elapsed, period)
    reset = _wait_until_fits(amount, amount, current, previous, elapsed, period)
    remaining = max(0, amount - estimate)
    return Outcome(False, amount, remaining, reset, retry, 0, None, 0, 0)


def _more_quota_in(
    remaining: float, amount: int, current: float, previous: float, elapsed: int, period: int
) -> int:
    """Microseconds until more than ``remaining`` is left: a request of one more fits.

    For whole counts, in closed form (this runs on every admitted request): the weighted
    previous count ``w = floor(previous * (period - e) / period)`` first drops below its value
    now at ``e = period + 1 - ceil(w * period / previous)``, checked like `_first_fit`; when
    it has no weight left, the current count starts to weigh less one microsecond into the
    next window. Fractional counts take the exact search.
    """
    wanted = math.floor(remaining) + 1
    if wanted > amount:
        return 0  # the quota is full
    if current.__class__ is int and previous.__class__ is int and remaining == wanted - 1:
        weight = int(amount - remaining) - current  # w, the previous count's weight now
        if weight >= 1:
            at = period + 1 - -(-weight * period // previous)
            if at >= period:
                return period - elapsed  # the previous count is gone when the window turns
            if previous * period < _EXACT_FLOOR:
                return at - elapsed  # the estimate's float floor is the exact floor here
            goal = amount - wanted
            if (
                _estimate(current, previous, at, period) <= goal
                and _estimate(current, previous, at - 1, period) > goal
            ):
                return at - elapsed
        elif weight == 0 and current >= 1:
            return period - elapsed + 1
    return _wait_until_fits(wanted, amount, current, previous, elapsed, period)


def _estimate(current: float, previous: float, elapsed: int, period: int) -> float:
    # The same float operations, in the same order, as the Lua script.
    return current + math.floor(previous * (period - elapsed) / period)


def _wait_until_fits(
    cost: float, amount: int, current: float, previous: float, elapsed: int, period: int
) -> int:
    """Microseconds until a request of ``cost`` passes (``cost <= amount - estimate``).

    With ``cost = amount`` this is the time until the quota is fully restored. The caller
    guarantees ``cost <= amount``, so it always passes by the end of the next window.
    """
    if cost <= amount - _estimate(current, previous, elapsed, period):
        return 0
    target = amount - cost  # for the closed-form guesses only; _fits() decides
    if cost <= amount - current:
        # It fits within this window, at the first e where the weighted previous count has
        # dropped to target - current.
        guess = _guess(target - current, previous, period)
        at = _first_fit(cost, amount, current, previous, guess, elapsed, period)
        if at < period:
            return at - elapsed
    # In the next window the current count becomes the weighted previous one.
    if current == 0:
        return period - elapsed
    if cost == amount and current.__class__ is int:
        return period - elapsed + _full_reset_in_next_window(current, period)
    return period - elapsed + _next_window_fit(cost, amount, current, period)


def _full_reset_in_next_window(current: int, period: int) -> int:
    """`_next_window_fit(amount, amount, current, period)` for a whole count, in closed form.

    The whole quota fits at e when ``floor(current * (period - e) / period) <= 0``. With
    integers the product is exact and Python's int / int is correctly rounded, so the float
    quotient is below 1 exactly when ``current * (period - e) <= period - 1`` (the quotient
    is then at most ``1 - 1/period``, and ``1/period`` is far above half an ulp of 1 for
    any period a `Limit` accepts, < 2**49 us). The first such e is the one below.
    """
    return period - (period - 1) // current


@functools.lru_cache(maxsize=4096, typed=True)
def _next_window_fit(cost: float, amount: int, current: float, period: int) -> int:
    """The first e of the next window where ``cost`` fits after ``current`` this window.

    A pure function of its arguments, memoized: every allowed request asks it (for its reset
    time) and the same few (cost, count, limit) come back, a new key's above all. ``typed``
    keeps 1 and 1.0 apart, since int and float arithmetic can round differently.
    """
    guess = _guess(amount - cost, current, period)
    return _first_fit(cost, amount, 0, current, guess, 0, period)


def _guess(allowance: float, count: float, period: int) -> int:
    """Near the first e with ``floor(count * (period - e) / period) <= allowance``."""
    if count < 1:
        return 0  # the weighted count is already 0 (and a tiny count would overflow below)
    # floor(x) <= a holds exactly when x < floor(a) + 1; flooring a fractional allowance
    # keeps the guess within a microsecond or two of the answer.
    return math.floor(period - (math.floor(allowance) + 1) * period / count) + 1


def _first_fit(
    cost: float, amount: int, cur: float, prev: float, guess: int, low: int, period: int
) -> int:
    """The smallest e in [low, period] where ``cost`` fits (it does at ``period``).

    Fitting is monotone in e. The closed-form guess is usually exact, but float rounding (of
    tiny or fractional counts) can move the real answer away from it; a binary search then
    finds the exact first microsecond in at most ~50 steps, whatever the period. (Plain
    arguments rather than a predicate closure: this runs on every request.)
    """
    if (
        low < guess <= period
        and cost <= amount - _estimate(cur, prev, guess, period)
        and not cost <= amount - _estimate(cur, prev, guess - 1, period)
    ):
        return guess
    if cost <= amount - _estimate(cur, prev, low, period):
        return low
    below, at = low, period  # it does not fit at below, it fits at at
    while at - below > 1:
        middle = (below + at) // 2
        if cost <= amount - _estimate(cur, prev, middle, period):
            at = middle
        else:
            below = middle
    return at
