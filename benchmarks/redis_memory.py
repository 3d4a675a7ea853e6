"""Redis ``MEMORY USAGE`` per key and algorithm: the key layout of 0.x before issue 5, and now.

    .venv/bin/python -m benchmarks.redis_memory            # about 1 s

It starts its own ``redis-server`` (no persistence), makes one request of cost 1 per
algorithm through `RedisBackend` (default prefix ``rl:``, limit ``1000/hour``; the sliding log
also with 100 and 1,000 requests in its window), and reads ``MEMORY USAGE`` (key name
included, ``SAMPLES 0``) and ``OBJECT ENCODING`` of each key. "Before" writes the same states
in the previous layout, exactly as that version did: ``rl:{<32 hex>}:<limit id>`` holding a
NUL and two or three doubles. Exits 1 when a single-value algorithm is not under 100 bytes.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import struct
import sys
import time

import redis.asyncio as aioredis

from asgi_ratelimit import Limit
from asgi_ratelimit.backends._protocol import Check
from asgi_ratelimit.backends.redis import RedisBackend

from .redis_server import RedisServer

__all__ = ["main"]

ALGORITHMS = (
    "fixed_window",
    "sliding_window_counter",
    "gcra",
    "leaky_bucket",
    "token_bucket",
    "sliding_window_log",
)
SINGLE_VALUE = frozenset(ALGORITHMS) - {"sliding_window_log"}
IDENTITY = "user:42"


def _old_key(limit: Limit) -> str:
    digest = hashlib.blake2b(IDENTITY.encode(), digest_size=16, person=b"asgi-ratelimit")
    return f"rl:{{{digest.hexdigest()}}}:{limit.id}"


def _old_value(limit: Limit, now_us: int) -> bytes:
    """The state one request leaves, as the previous version stored it (NUL and doubles)."""
    window = now_us // limit.period_us
    if limit.algorithm == "fixed_window":
        return b"\0" + struct.pack("<2d", window, 1)
    if limit.algorithm == "sliding_window_counter":
        return b"\0" + struct.pack("<3d", window, 1, 0)
    if limit.algorithm == "token_bucket":
        return b"\0" + struct.pack("<2d", (limit.burst - 1) * limit.period_us, now_us)
    return b"\0" + struct.pack("<2d", limit.period_us, now_us)  # backlog at now


async def _measure(url: str) -> list[tuple[str, int | None, int, str]]:
    rows: list[tuple[str, int | None, int, str]] = []
    client = aioredis.from_url(url)
    now_us = time.time_ns() // 1000
    async with RedisBackend.from_url(url, deny_cache=False) as backend:
        for algorithm in ALGORITHMS:
            for requests in (1, 100, 1000) if algorithm == "sliding_window_log" else (1,):
                limit = Limit(f"{max(requests, 1000)}/hour", algorithm=algorithm)
                await backend.reset(IDENTITY, [limit])
                for _ in range(requests):
                    await backend.hit([Check(IDENTITY, limit)])
                key = backend.storage_key(IDENTITY, limit)
                after = await client.memory_usage(key, samples=0)
                encoding = (await client.object("encoding", key)).decode()
                before: int | None = None
                if requests == 1 and algorithm != "sliding_window_log":
                    old = _old_key(limit)
                    await client.set(old, _old_value(limit, now_us), px=3_600_000)
                    before = await client.memory_usage(old, samples=0)
                    await client.delete(old)
                elif requests == 1:
                    old = _old_key(limit)
                    await client.rpush(old, str(now_us))
                    before = await client.memory_usage(old, samples=0)
                    await client.delete(old)
                name = algorithm if requests == 1 else f"{algorithm} ({requests} requests)"
                rows.append((name, before, int(after), encoding))
    await client.aclose()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args(argv)
    with RedisServer() as server:
        rows = asyncio.run(_measure(server.url))
        info = asyncio.run(_server_version(server.url))
    print(f"MEMORY USAGE per key, bytes (Redis {info}, prefix 'rl:', 1000/hour)")
    print(f"{'algorithm':<40} {'before':>7} {'now':>7}  encoding")
    failed = False
    for name, before, after, encoding in rows:
        shown = "-" if before is None else str(before)
        print(f"{name:<40} {shown:>7} {after:>7}  {encoding}")
        if name in SINGLE_VALUE and after >= 100:
            failed = True
    if failed:
        print("FAIL: a single-value algorithm takes 100 bytes or more", file=sys.stderr)
    return 1 if failed else 0


async def _server_version(url: str) -> str:
    client = aioredis.from_url(url)
    try:
        return str((await client.info("server"))["redis_version"])
    finally:
        await client.aclose()


if __name__ == "__main__":
    sys.exit(main())
