"""Traffic patterns replayed through the real algorithms on a fake clock (``simulate``).

    times = arrivals("boundary", Limit("10/minute"))
    run = replay(Limit("10/minute", algorithm="fixed_window"), times)
    run.admitted, run.refused, run.most_in_any_window, run.longest_retry

Nothing here sleeps: a `MemoryBackend` is driven by a clock set to each arrival, so every
number is exact and the same on every run (``random`` takes a seed).
"""

from __future__ import annotations

import asyncio
import random
from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, get_args

from .._decision import Policy
from .._engine import Engine
from .._load import LoadMonitor
from .._rates import ALGORITHM_NAMES, Limit
from ..backends._memory import MemoryBackend
from ..backends._protocol import Check

__all__ = ["PATTERNS", "Pattern", "Run", "algorithms", "arrivals", "most_in_any_window", "replay"]

Pattern = Literal["steady", "burst", "boundary", "random"]
PATTERNS: tuple[str, ...] = get_args(Pattern)
#: The fake clock's start: a whole day since the epoch, so every fixed window starts at 0.
START = 1_700_006_400.0
_START_US = 1_700_006_400_000_000


@dataclass
class Run:
    """What one algorithm made of the arrivals (times in seconds from the start)."""

    algorithm: str
    limit: Limit
    admitted_at: list[float] = field(default_factory=list)
    refused_at: list[float] = field(default_factory=list)
    #: the leaky bucket's waits before an admitted request proceeds (shaping)
    delays: list[float] = field(default_factory=list)
    #: what each refused request was told to wait (Retry-After)
    retries: list[float] = field(default_factory=list)
    #: when each admitted request reaches the app (after a shaping delay), in whole
    #: microseconds from the start, as the algorithm counts them (float sums could lose one)
    reached_us: list[int] = field(default_factory=list)

    @property
    def admitted(self) -> int:
        return len(self.admitted_at)

    @property
    def refused(self) -> int:
        return len(self.refused_at)

    @property
    def most_in_any_window(self) -> int:
        """The most requests admitted in any span of one period (the limit says: amount)."""
        return most_in_any_window(sorted(self.reached_us), self.limit.period_us)

    @property
    def longest_delay(self) -> float:
        return max(self.delays, default=0.0)

    @property
    def longest_retry(self) -> float:
        return max(self.retries, default=0.0)

    def summary(self) -> dict[str, object]:
        return {
            "algorithm": self.algorithm,
            "admitted": self.admitted,
            "refused": self.refused,
            "most_in_any_window": self.most_in_any_window,
            "longest_delay": round(self.longest_delay, 6),
            "longest_retry": round(self.longest_retry, 6),
        }


def arrivals(
    pattern: Pattern,
    limit: Limit,
    rate: float | None = None,
    duration: float | None = None,
    seed: int = 0,
) -> list[float]:
    """Request times (seconds from 0) over ``duration`` (default: three periods).

    ``steady``: evenly spaced at ``rate`` a second (default: twice the limit's pace);
    ``burst``: twice the amount at once at the start of each period; ``boundary``: the whole
    amount just before each window boundary and again just after it; ``random``: Poisson
    arrivals at ``rate``, from ``seed``.
    """
    period, amount = limit.period, limit.amount
    duration = 3.0 * period if duration is None else duration
    pace = 2.0 * amount / period if rate is None else rate
    if pattern == "steady":
        count = int(duration * pace)
        return [i / pace for i in range(count)]
    if pattern == "burst":
        return [k * period for k in range(int(duration // period)) for _ in range(2 * amount)]
    if pattern == "boundary":
        step = period * 0.1 / amount  # the amount within the last and first tenth of windows
        times: list[float] = []
        for boundary in range(1, max(2, int(duration // period))):
            edge = boundary * period
            times += [edge - period * 0.1 + i * step for i in range(amount)]
            times += [edge + i * step for i in range(amount)]
        return times
    if pattern == "random":
        generator = random.Random(seed)
        times, now = [], generator.expovariate(pace)
        while now < duration:
            times.append(now)
            now += generator.expovariate(pace)
        return times
    raise ValueError(f"unknown pattern {pattern!r} (use {', '.join(PATTERNS)})")


def replay(
    limit: Limit,
    times: list[float],
    progress: Callable[[int], None] | None = None,
    busy_from: float | None = None,
) -> Run:
    """Send one request at each of ``times`` through ``limit``'s algorithm, by the engine
    the limiter decides with (soft and elastic limits bend as they do in an app); the
    server has capacity to spare until ``busy_from`` seconds (never busy when None)."""
    clock = _Clock()

    def level() -> float:
        return 1.0 if busy_from is not None and clock.now - START >= busy_from else 0.0

    engine = Engine(MemoryBackend(clock=clock), load=LoadMonitor(signal=level))
    run = Run(limit.algorithm, limit)
    checks, policies = [Check("simulate", limit.enforced, 1, "")], [Policy("simulate")]

    async def send_all() -> None:
        for at in times:
            clock.now = START + at
            decision = await engine.decide(checks, policies, None)
            if decision.allowed:
                run.admitted_at.append(at)
                run.delays.append(decision.delay)
                delay_us = round(decision.delay * 1_000_000)
                run.reached_us.append(round(clock.now * 1_000_000) - _START_US + delay_us)
            else:
                run.refused_at.append(at)
                run.retries.append(decision.retry_after)
            if progress is not None:
                progress(1)

    asyncio.run(send_all())  # the memory backend never waits: no I/O, only its loop
    return run


def most_in_any_window(times: Sequence[float], period: float) -> int:
    """The most of the sorted ``times`` inside any span ``[t, t + period)``."""
    best = 0
    for index, start in enumerate(times):
        best = max(best, bisect_left(times, start + period, index) - index)
    return best


def algorithms(name: str) -> tuple[str, ...]:
    """``all``, or one algorithm's name (checked)."""
    if name == "all":
        return tuple(ALGORITHM_NAMES)
    if name not in ALGORITHM_NAMES:
        raise ValueError(f"unknown algorithm {name!r} (use all, {', '.join(ALGORITHM_NAMES)})")
    return (name,)


class _Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now
