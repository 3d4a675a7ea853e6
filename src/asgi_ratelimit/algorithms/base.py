"""What every algorithm returns, and the integer helpers they share.

Algorithms are pure: ``decide(state, now, limit, cost) -> Outcome``. ``now`` is an integer
number of microseconds; times inside an `Outcome` are microseconds too. Integers keep window
boundaries and retry times exact; the Redis scripts do the same arithmetic in the same order,
so both backends give the same answers.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

__all__ = ["NEVER", "Outcome", "State", "ceil_div", "scaled_cost", "whole"]

# A state is a small tuple of numbers whose meaning belongs to its algorithm.
State = tuple[Any, ...]

# retry_after of a request that can never pass (its cost exceeds the limit's capacity).
NEVER = math.inf


class Outcome(NamedTuple):
    """One limit's answer for one request, at one instant."""

    allowed: bool
    limit: int
    #: left after this request when allowed, left now when denied (may be fractional)
    remaining: float
    #: microseconds until the quota is fully restored
    reset_us: int
    #: microseconds until the same request would pass; 0 when allowed, NEVER if it cannot
    retry_us: float
    #: microseconds the request must wait for its slot (leaky bucket shaping), else 0
    delay_us: int
    #: the state to store when the request is admitted
    state: State | None
    #: microseconds the stored state matters for; after that it equals no state at all
    ttl_us: int
    #: when allowed: microseconds until more quota than ``remaining`` is available (until a
    #: request of ``floor(remaining) + 1`` would pass), 0 when the quota is full
    next_us: int = 0


def ceil_div(numerator: float, denominator: int) -> int:
    """``ceil(numerator / denominator)``, exact for integers and never below 0."""
    if numerator <= 0:
        return 0
    if isinstance(numerator, int):
        return -(-numerator // denominator)
    return math.ceil(numerator / denominator)


def scaled_cost(cost: float, scale: int) -> int:
    """``cost * scale`` as an ``int``, rounded up: the bucket kinds count in these small units.

    A cost of 0.5 on a 60 s period is exactly 30_000_000 units; a cost such as 1e-300 still
    takes one unit, so every number a bucket stores stays an exact integer (a float sum at
    epoch-sized magnitudes would round, and could round in the client's favour).
    """
    step = cost * scale
    if isinstance(step, int):
        return step
    if cost.is_integer():
        # A whole cost is exact whatever its type: Redis sees 2.0 as 2, and past 2^53 the
        # float product would round.
        return int(cost) * scale
    return math.ceil(step)


def whole(count: float) -> float:
    """A count that is a whole float as an int: Redis cannot tell 2.0 from 2, and past 2^53
    the sliding counter's arithmetic differs between them (exact for ints)."""
    if count.__class__ is float and count.is_integer():
        return int(count)
    return count
