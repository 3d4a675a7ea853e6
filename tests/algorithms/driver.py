"""Play a table of requests through one algorithm and check every number it answers.

A row is ``(t, cost, allowed, remaining, reset, retry, delay)`` with times in seconds since
`T0`; the driver feeds the pure ``decide`` function the previous admitted state, exactly as a
backend would (a denied request stores nothing, a cost of 0 stores nothing).
"""

from __future__ import annotations

import math
from typing import NamedTuple

from asgi_ratelimit._rates import Limit
from asgi_ratelimit.algorithms import DECIDERS, Outcome, State

__all__ = ["INF", "T0", "Driver", "Row", "play", "us"]

# Midnight UTC, 2023-11-14: aligned to every whole second, minute, hour and day.
T0 = 1_699_920_000
INF = math.inf


def us(seconds: float) -> float:
    """Seconds to whole microseconds (inf stays inf)."""
    return seconds if math.isinf(seconds) else round(seconds * 1_000_000)


class Row(NamedTuple):
    t: float
    cost: float
    allowed: bool
    remaining: float
    reset: float
    retry: float = 0
    delay: float = 0


class Driver:
    """One key of one limit, driven by hand: ``driver.at(12.5, cost=1) -> Outcome``."""

    def __init__(self, limit: Limit, start: int = T0) -> None:
        self.limit = limit
        self.decide = DECIDERS[limit.algorithm]
        self.start_us = start * 1_000_000
        self.state: State | None = None

    def at_us(self, now_us: int, cost: float = 1) -> Outcome:
        outcome = self.decide(self.state, now_us, self.limit, cost)
        if outcome.allowed and cost and outcome.state is not None:
            self.state = outcome.state
        return outcome

    def at(self, t: float, cost: float = 1) -> Outcome:
        return self.at_us(self.start_us + round(t * 1_000_000), cost)


def play(limit: Limit, rows: list[Row], start: int = T0) -> Driver:
    """Run every row in order; fail listing each row whose answer differs from the table."""
    driver = Driver(limit, start)
    wrong = []
    for index, row in enumerate(rows):
        got = driver.at(row.t, row.cost)
        expected = (row.allowed, row.remaining, us(row.reset), us(row.retry), us(row.delay))
        actual = (got.allowed, got.remaining, got.reset_us, got.retry_us, got.delay_us)
        if actual != expected or got.limit != limit.capacity:
            wrong.append(f"row {index} {row}: got {actual}, limit={got.limit}")
    assert not wrong, "\n".join(wrong)
    return driver
