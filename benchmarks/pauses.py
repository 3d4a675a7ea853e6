"""The longest waits of ``limiter.hit`` while the memory backend grows: its rebuilds and sweeps.

    .venv/bin/python -m benchmarks.pauses                      # 1,000,000 keys, both scenarios
    .venv/bin/python -m benchmarks.pauses --keys 200000 --only grow

Each call is ``await limiter.hit(key, limit)`` for a new key (``user:00000000`` ...), timed
alone in this thread's CPU time (``thread_time_ns``: on a shared machine, wall time also counts
the moments other processes held the core); a row gives the median, the 99.9th percentile and
the longest call, in microseconds. Scenarios:

- ``grow``: a fixed instant, ``100/hour``: nothing expires, the tables only grow (rebuilds);
- ``expire``: the clock moves 1 ms per call on ``100/5 minutes``: every five minutes of calls
  the keys of the window before expire, and sweeps drop them while new keys arrive.

Garbage collection is off while timing, so its pauses (not the backend's) do not show.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import time

from asgi_ratelimit import Limit, MemoryBackend, RateLimiter

__all__ = ["main", "pauses"]

_NOW = 1_763_700_000.0  # in 2025
_SCENARIOS = {"grow": ("100/hour", 0.0), "expire": ("100/5 minutes", 0.001)}


async def pauses(keys: int, text: str, step: float) -> list[int]:
    """The nanoseconds each of ``keys`` calls took, one new key each."""
    now = [_NOW]
    limiter = RateLimiter(backend=MemoryBackend(clock=lambda: now[0]))
    limit = Limit(text, algorithm="fixed_window")
    await limiter.hit("warm-up", limit)
    timer = time.thread_time_ns
    spent = [0] * keys
    gc.disable()
    try:
        for i in range(keys):
            key = f"user:{i:08d}"
            start = timer()
            await limiter.hit(key, limit)
            spent[i] = timer() - start
            now[0] += step
    finally:
        gc.enable()
    return spent


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--only", choices=sorted(_SCENARIOS), action="append")
    args = parser.parse_args(argv)
    import asgi_ratelimit

    build = "compiled" if asgi_ratelimit.COMPILED else "pure"
    print(f"{'scenario':<8} {'build':<9} {'keys':>9} {'median us':>10}", end="")
    print(f" {'p99.9 us':>10} {'max us':>10}")
    for name in args.only or list(_SCENARIOS):
        text, step = _SCENARIOS[name]
        spent = sorted(asyncio.run(pauses(args.keys, text, step)))
        p999 = spent[min(len(spent) - 1, len(spent) * 999 // 1000)]
        print(
            f"{name:<8} {build:<9} {args.keys:>9,} {statistics.median(spent) / 1000:>10.1f}"
            f" {p999 / 1000:>10.1f} {spent[-1] / 1000:>10.1f}"
        )


if __name__ == "__main__":
    main()
