"""The backend's own pipelined connection against redis-py (with hiredis), per script call.

    .venv/bin/python -m benchmarks.redis_transport          # about 20 s

It starts its own ``redis-server`` on a free loopback port and times the same three-limit
script call (``FCALL``) sent three ways: through the backend (`RedisBackend.hit`, its own
connection), through redis-py's ``execute_command`` on a pool, and, for scale, redis-py's
bare ``GET`` and ``PING``. Each is timed one call at a time (latency: a round trip plus the
client's Python) and with 50 calls in flight (throughput: the client's Python per call,
since Redis answers a pipeline faster than the client can build and read it). Rounds
interleave the variants; it prints the median us per call of each.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable

import redis.asyncio as aioredis

from asgi_ratelimit._rates import Limit
from asgi_ratelimit.backends._protocol import Check
from asgi_ratelimit.backends.redis import RedisBackend
from asgi_ratelimit.backends.redis._script import FUNCTION_NAME, encode, script_keys

from .redis_hot_path import _Server

__all__ = ["main"]

ROUNDS = 7
CALLS = 3000
IN_FLIGHT = 50

Call = Callable[[], Awaitable[object]]


async def _timed(call: Call, in_flight: int) -> float:
    """us per call, for CALLS calls with ``in_flight`` of them at once."""

    async def worker() -> None:
        for _ in range(CALLS // in_flight):
            await call()

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(in_flight)))
    return (time.perf_counter() - started) / CALLS * 1e6


async def _run(url: str) -> None:
    limits = [Limit("1000000/hour"), Limit("100000/minute", algorithm="fixed_window")]
    limits.append(Limit("10000/second", algorithm="gcra"))
    checks = [Check("user:1", limit) for limit in limits]
    async with RedisBackend.from_url(url, prefix="bench:", deny_cache=False) as backend:
        keys = [backend.storage_key("user:1", limit) for limit in limits]
        args = encode("hit", checks, keys, now_us=None)
        names = script_keys(checks, keys)
        client = aioredis.from_url(url, max_connections=IN_FLIGHT)

        async def ours() -> object:
            return await backend.hit(checks)

        async def redis_py() -> object:
            return await client.execute_command(
                "FCALL", FUNCTION_NAME, len(names), *names, *args, NEVER_DECODE=[]
            )

        variants: dict[str, Call] = {
            "ours: RedisBackend.hit, 3 limits (own connection)": ours,
            "redis-py execute_command FCALL, same call": redis_py,
            "redis-py GET": lambda: client.get("x"),
            "redis-py PING": client.ping,
        }
        for in_flight in (1, IN_FLIGHT):
            samples: dict[str, list[float]] = {name: [] for name in variants}
            for _ in range(ROUNDS):
                for name, call in variants.items():
                    samples[name].append(await _timed(call, in_flight))
            print(f"\n{in_flight} in flight: us per call (median of {ROUNDS} rounds)")
            for name, values in samples.items():
                print(f"  {statistics.median(values):8.1f}  {name}")
        await client.aclose()


def main() -> None:
    server = _Server()
    try:
        asyncio.run(_run(f"redis://127.0.0.1:{server.port}/0"))
    finally:
        server.close()


if __name__ == "__main__":
    main()
