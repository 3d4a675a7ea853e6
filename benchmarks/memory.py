"""Memory per key: tracemalloc for in-process backends, Redis ``MEMORY USAGE`` for Redis."""

from __future__ import annotations

import gc
import tracemalloc
from typing import Any

from .contenders import CONTENDERS, Unavailable
from .driver import client_ips, run_batch

__all__ = [
    "app_bytes_per_client",
    "our_memory_per_key",
    "our_redis_per_key",
    "our_rss_per_key",
    "redis_per_client",
]

# Low enough that a key stays active (a bucket that refills one token in milliseconds would
# be idle, and swept, before the measurement ends), high enough that one request passes.
_TEXT = "100/hour"


def _algorithms() -> list[str]:
    from asgi_ratelimit.algorithms import DECIDERS

    return list(DECIDERS)


def our_memory_per_key(n: int) -> dict[str, float]:
    """Bytes our MemoryBackend keeps per active key, per algorithm (one request per key)."""
    from asgi_ratelimit import Limit, MemoryBackend
    from asgi_ratelimit.backends._protocol import Check

    result: dict[str, float] = {}
    for algorithm in _algorithms():
        limit = Limit(_TEXT, algorithm=algorithm)
        backend = MemoryBackend(max_keys=n * 2)
        addresses = client_ips(n)
        backend.decide([Check("warm-up", limit, 1)])
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        for address in addresses:
            # The key is built inside the measured window, as a request builds it: whatever
            # the backend keeps of it (the string itself, a copy, a hash) is counted.
            backend.decide([Check(f"ip:{address}", limit, 1)])
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        if len(backend) != n + 1:
            raise RuntimeError(f"{algorithm}: {len(backend)} keys kept, expected {n + 1}")
        result[algorithm] = (after - before) / n
    return result


def our_rss_per_key(n: int) -> dict[str, float]:
    """What the whole process grows by per active key of our MemoryBackend at ``n`` keys
    (resident set, a fresh process per algorithm): the issue's measure, at 1,000,000."""
    from .memory_per_key import rss_per_key

    return {algorithm: rss_per_key(algorithm, n) for algorithm in _algorithms()}


async def app_bytes_per_client(n: int) -> dict[str, float | str]:
    """Bytes each in-memory contender's app retains per distinct client (through the app)."""
    result: dict[str, float | str] = {}
    ips = client_ips(n, start=1_000_000)
    for contender in CONTENDERS:
        if contender.kind not in ("ours", "peer"):
            continue
        try:
            built = await contender.build("one", "memory", None)
        except Unavailable as exc:
            result[contender.name] = f"not measured: {exc}"
            continue
        await run_batch(built, client_ips(50, start=2_000_000), 0, 50)  # lazy set-up
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        outcomes = await run_batch(built, ips, 0, n)
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        await built.aclose()
        if outcomes != {"200": n}:
            raise RuntimeError(f"{contender.name}: answered {dict(outcomes)}")
        result[contender.name] = (after - before) / n
    return result


async def _usage(client: Any) -> tuple[int, int]:
    total = keys = 0
    async for key in client.scan_iter(count=1000):
        if key == b"bench:floor":
            continue
        keys += 1
        total += await client.memory_usage(key, samples=0) or 0
    return total, keys


async def our_redis_per_key(url: str, n: int) -> dict[str, dict[str, float]] | str:
    """``MEMORY USAGE`` per identity of our RedisBackend, per algorithm (one request each)."""
    import redis.asyncio

    from asgi_ratelimit import Limit
    from asgi_ratelimit.backends._protocol import Check

    try:
        from asgi_ratelimit.backends.redis import RedisBackend
    except ImportError as exc:
        return f"not measured: {exc}"
    client = redis.asyncio.Redis.from_url(url)
    backend = RedisBackend.from_url(url, timeout=1.0)
    result: dict[str, dict[str, float]] = {}
    try:
        for algorithm in _algorithms():
            await client.flushdb()
            limit = Limit(_TEXT, algorithm=algorithm)
            for key in client_ips(n):
                await backend.hit([Check(key, limit, 1)])
            total, keys = await _usage(client)
            result[algorithm] = {"bytes": total / n, "keys": keys / n}
    finally:
        await backend.aclose()
        await client.flushdb()
        await client.aclose()
    return result


async def redis_per_client(url: str, n: int) -> dict[str, dict[str, Any] | str]:
    """Per client, for each Redis contender: ``MEMORY USAGE`` summed over the keys it leaves,
    and the commands and server-side microseconds (``INFO commandstats``) each request costs.
    """
    import redis.asyncio

    client = redis.asyncio.Redis.from_url(url)
    result: dict[str, dict[str, Any] | str] = {}
    ips = client_ips(n, start=3_000_000)
    try:
        for contender in CONTENDERS:
            if contender.kind not in ("ours", "peer"):
                continue
            await client.flushdb()
            try:
                built = await contender.build("one", "redis", url)
            except Unavailable as exc:
                result[contender.name] = f"not measured: {exc}"
                continue
            await run_batch(built, client_ips(20, start=3_900_000), 0, 20)  # script loads
            await client.config_resetstat()
            outcomes = await run_batch(built, ips, 0, n)
            stats = await client.info("commandstats")
            await built.aclose()
            if outcomes != {"200": n}:
                raise RuntimeError(f"{contender.name}: answered {dict(outcomes)}")
            total, keys = await _usage(client)
            # What Redis itself spends per request (commands, scripts), from its own counters:
            # the part of a round trip no client-side work can remove.
            calls = sum(v["calls"] for v in stats.values())
            usec = sum(v["usec"] for v in stats.values())
            result[contender.name] = {
                "bytes": total / n,
                "keys": keys / n,
                "commands": calls / n,
                "server_us": usec / n,
                "by_command": {
                    k.removeprefix("cmdstat_"): round(v["usec"] / n, 2) for k, v in stats.items()
                },
            }
    finally:
        await client.flushdb()
        await client.aclose()
    return result
