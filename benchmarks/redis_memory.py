"""Redis memory per identity: ``used_memory`` growth over many, and ``MEMORY USAGE`` per key.

    .venv/bin/python -m benchmarks.redis_memory                       # about 1 s
    .venv/bin/python -m benchmarks.redis_memory --users 1000000       # a few minutes
    .venv/bin/python -m benchmarks.redis_memory --users 1000000 --baseline ../main

With ``--users N`` it hits N distinct identities once each with one limit (``1000/hour``) of
each algorithm but the sliding log, and reports the server's ``used_memory`` growth divided
by N: what a managed Redis bills per active user, with every overhead of the keyspace
(issue 26: at most 32 bytes at 1,000,000 users). ``--baseline TREE`` measures another
checkout's package (``TREE/src``) the same way on the same server first.

Without it: it makes one request of cost 1 per algorithm through `RedisBackend` (default
prefix ``rl:``, limit ``1000/hour``; the sliding log also with 100 and 1,000 requests in its
window), and reads ``MEMORY USAGE`` (key name included, ``SAMPLES 0``) and ``OBJECT
ENCODING`` of the key holding the state: the sliding log's own list, else the hash that the
identity's bucket shares, here with its one field (what one field adds to a shared hash is
what ``--users`` measures). "Before" writes the same states in the layout of 0.x, exactly as
that version did: ``rl:{<32 hex>}:<limit id>`` holding a NUL and two or three doubles.
Either way it starts its own ``redis-server`` (no persistence). Exits 1 when a figure misses
its target (``--users``: 32 bytes; else a one-field hash over 120 bytes).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import struct
import subprocess
import sys
import time

import redis.asyncio as aioredis

from asgi_ratelimit import Limit
from asgi_ratelimit.backends._protocol import Check
from asgi_ratelimit.backends.redis import RedisBackend
from asgi_ratelimit.backends.redis._keys import script_key

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
                key = script_key(backend.storage_key(IDENTITY, limit), algorithm)
                if algorithm != "sliding_window_log":  # the hash its bucket shares, alone
                    [key] = [name async for name in client.scan_iter(match=f"{key}:*")]
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


async def per_user(url: str, users: int) -> dict[str, float]:
    """``{algorithm: used_memory growth / users}`` over ``users`` distinct identities."""
    client = aioredis.from_url(url)
    result: dict[str, float] = {}
    # A long timeout: a busy machine must not turn a slow reply into the failure policy.
    async with RedisBackend.from_url(url, deny_cache=False, timeout=30.0) as backend:
        for algorithm in sorted(SINGLE_VALUE):
            limit = Limit("1000/hour", algorithm=algorithm)
            await client.flushall()
            await backend.hit([Check("warm-up", limit)])  # the script loaded, once
            before = (await client.info("memory"))["used_memory"]
            for start in range(0, users, IN_FLIGHT):
                stop = min(start + IN_FLIGHT, users)
                await asyncio.gather(
                    *(backend.hit([Check(f"user:{i}", limit)]) for i in range(start, stop))
                )
            after = (await client.info("memory"))["used_memory"]
            result[algorithm] = (after - before) / users
    await client.flushall()
    await client.aclose()
    return result


#: Calls in flight while filling Redis (one pipelined connection).
IN_FLIGHT = 200


def _baseline(tree: str, url: str, users: int) -> dict[str, float]:
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(tree, "src"), here]))
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.redis_memory", "--url", url, "--users", str(users)],
        env=env, check=True, capture_output=True, text=True,
    )  # fmt: skip
    data: dict[str, float] = json.loads(out.stdout)
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, help="measure used_memory over this many users")
    parser.add_argument("--baseline", help="with --users: another checkout to measure first")
    parser.add_argument("--url", help="with --users: this Redis (FLUSHED), JSON out")
    args = parser.parse_args(argv)
    if args.users and args.url:
        print(json.dumps(asyncio.run(per_user(args.url, args.users))))
        return 0
    if args.users:
        with RedisServer() as server:
            before = _baseline(args.baseline, server.url, args.users) if args.baseline else None
            after = asyncio.run(per_user(server.url, args.users))
            info = asyncio.run(_server_version(server.url))
        print(f"used_memory growth per user, bytes (Redis {info}, {args.users:,} distinct "
              "identities, one 1000/hour limit each)")  # fmt: skip
        print(f"{'algorithm':<26} {'before':>7} {'now':>7}")
        for algorithm, now in after.items():
            shown = "-" if before is None else f"{before[algorithm]:.1f}"
            print(f"{algorithm:<26} {shown:>7} {now:>7.1f}")
        return 0 if all(value <= PER_USER_TARGET for value in after.values()) else 1
    with RedisServer() as server:
        rows = asyncio.run(_measure(server.url))
        info = asyncio.run(_server_version(server.url))
    print(f"MEMORY USAGE of the key holding one state, bytes (Redis {info}, 1000/hour)")
    print(f"{'algorithm':<40} {'before':>7} {'now':>7}  encoding")
    failed = False
    for name, before, after, encoding in rows:
        shown = "-" if before is None else str(before)
        print(f"{name:<40} {shown:>7} {after:>7}  {encoding}")
        if name in SINGLE_VALUE and after > 120:
            failed = True
    if failed:
        print("FAIL: a hash of one field takes more than 120 bytes", file=sys.stderr)
    return 1 if failed else 0


#: Issue 26: bytes of used_memory per active user at 1,000,000 users.
PER_USER_TARGET = 32


async def _server_version(url: str) -> str:
    client = aioredis.from_url(url)
    try:
        return str((await client.info("server"))["redis_version"])
    finally:
        await client.aclose()


if __name__ == "__main__":
    sys.exit(main())
