"""The six rate-limiting algorithms, as pure functions of (state, now, limit, cost).

Each module exposes ``decide(state, now_us, limit, cost) -> Outcome``; `DECIDERS` maps the
algorithm names that `Limit(algorithm=...)` accepts to those functions.
"""

from __future__ import annotations

from collections.abc import Callable

from .._rates import Limit
from . import (
    fixed_window,
    gcra,
    leaky_bucket,
    sliding_window_counter,
    sliding_window_log,
    token_bucket,
)
from .base import NEVER, Outcome, State

__all__ = ["DECIDERS", "NEVER", "Decider", "Outcome", "State"]

Decider = Callable[[State | None, int, Limit, float], Outcome]

DECIDERS: dict[str, Decider] = {
    "fixed_window": fixed_window.decide,
    "sliding_window_log": sliding_window_log.decide,
    "sliding_window_counter": sliding_window_counter.decide,
    "token_bucket": token_bucket.decide,
    "gcra": gcra.decide,
    "leaky_bucket": leaky_bucket.decide,
}
